/*
 * solver/smt.h - the symbolic side of the solver: Z3 contexts, tensors of
 * real-valued terms, operator encoders and the equivalence check of one
 * proof obligation.
 *
 * Files: smt.c (context, term wrappers, exact numerals), smt_tensor.c
 * (tensors, slicing, partial-sum parts), smt_encode.c (one encoder per
 * operator of docs/operators.md, keyed by vd_op_id), smt_check.c (fast path
 * and solver path of the equivalence check, counterexamples).
 *
 * Z3 stays inside solver/: this header does not include z3.h.  A term is a
 * vd_term, the same pointer as a Z3_ast (struct _Z3_ast is Z3's own opaque
 * tag), so the solver/ sources pass it to Z3 directly and other modules only hold it.
 *
 * Contexts and memory.  A vd_smt is one Z3 context (Z3_mk_context_rc) plus an
 * arena: every term made through the wrappers below is inc_ref'd once and
 * remembered; vd_smt_reset() dec_refs them all, so memory stays bounded per
 * stage without paying for a new context (about 4 ms) per stage.  After a
 * reset every term and every tensor's terms are dead: free tensors first.
 * Reference counting never leaves smt.c.  A vd_smt is not thread-safe: one
 * per thread (Z3 contexts are not thread-safe either).
 *
 * Errors.  Z3 reports errors through a handler that we set to a no-op (Z3's
 * default one exits); every wrapper checks Z3's error code right after its
 * call, and the first error is kept on the vd_smt (sticky until the next
 * reset).  Wrappers return NULL after an error and propagate NULL
 * arguments, so code may build a whole expression and check once: any
 * public function that returns vd_rc turns a Z3 error into VD_EINTERNAL
 * with Z3's message.
 *
 * Semantics: values are real numbers (DESIGN.md); floating-point rounding is
 * out of scope.  Transcendental kernels are uninterpreted function symbols
 * named after the kernel ("exp", "rsqrt", ...), shared by every term of one
 * context, so both graphs of a stage apply the same function (sound under
 * congruence: f(a) = f(b) is only concluded from a = b).
 *
 * Layer: solver/ is Z3 encodings of the registry, normal forms, stage
 * solving; it may include the modules before it (common/ to stages/)
 * (z3.h only here).  tools/check_layers.sh (make lint) enforces the order.
 */
#ifndef VD_SMT_H
#define VD_SMT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/diag.h"
#include "../common/limits.h"
#include "../ops/ops.h"

struct _Z3_ast;
typedef struct _Z3_ast *vd_term;

typedef struct vd_smt vd_smt;

/* ---- context (smt.c) ----------------------------------------------------- */

/* Creates a context.  d (borrowed, may be NULL) receives creation errors. */
vd_rc vd_smt_new(vd_smt **out, vd_diag *d);
/* Frees the context and every term; accepts NULL. */
void vd_smt_free(vd_smt *s);
/* Releases every term made since the last reset (O(terms)) and clears the
 * sticky error.  Every 64 resets the Z3 context itself is recreated so that
 * Z3's internal caches stay bounded as well. */
vd_rc vd_smt_reset(vd_smt *s, vd_diag *d);

/* Per-check wall-clock limit in milliseconds (0 = none).  Default
 * VD_LIM_STAGE_TIMEOUT_MS (common/limits.h).
 * At the limit the solver is interrupted; if Z3 does not return within a
 * grace period its check is abandoned on its own thread (with its own
 * context), so the limit really ends the check.  Load-dependent by nature:
 * the budget below is the limit that decides, this one is the backstop. */
void vd_smt_set_timeout(vd_smt *s, unsigned ms);
/* Deterministic work budget per check (0 = unlimited): nf_steps bounds the
 * polynomial normal form (smt_poly.c), rlimit is Z3's resource limit for
 * the solver (and the simplifier's step limit).  Defaults
 * VD_SMT_DEFAULT_NF_STEPS and VD_SMT_DEFAULT_RLIMIT. */
#define VD_SMT_DEFAULT_NF_STEPS ((uint64_t)VD_LIM_STAGE_BUDGET)
#define VD_SMT_DEFAULT_RLIMIT ((uint64_t)VD_LIM_STAGE_BUDGET)
void vd_smt_set_budget(vd_smt *s, uint64_t nf_steps, uint64_t rlimit);
/* Checks abandoned at their wall-clock limit whose Z3 call has not returned
 * yet (process-wide).  A CLI that exits while this is non-zero must use
 * _exit: the abandoned threads are still inside Z3. */
size_t vd_smt_orphans(void);
/* Seed of the random witness that the check tries before the solver
 * (smt_check.c; OPTIMIZATION-ONLY: any seed gives the same verdicts).
 * Default VD_LIM_SEED; `verdict --seed N` sets it. */
void vd_smt_set_seed(vd_smt *s, uint64_t seed);
/* Enables (default) or disables the simplifier fast path of vd_smt_check;
 * verdicts must not depend on it (the test suite runs both ways). */
void vd_smt_set_fast_path(vd_smt *s, int on);
/* OPTIMIZATION-ONLY: when on, vd_smt_check tries the random witness before
 * the normal form (a stage that is probably failing: a boundary-only plan's
 * model-sized stage downstream of a dropped candidate); off by default. */
void vd_smt_set_witness_first(vd_smt *s, int on);

/* The sticky Z3 error: VD_OK, or VD_EINTERNAL recorded into d with Z3's
 * message and `what` as the record. */
vd_rc vd_smt_status(vd_smt *s, vd_diag *d, const char *what);
/* Nonzero once Z3 ran out of memory in any context of the process: every
 * context then refuses work (VD_ENOMEM) and the run must end; see smt.c. */
int vd_smt_out_of_memory(void);
/* Z3's message of the first error since the last reset, "" if none. */
const char *vd_smt_error(const vd_smt *s);
/* Terms currently held by the arena (for memory figures and tests). */
size_t vd_smt_term_count(const vd_smt *s);

/* ---- terms (smt.c) ------------------------------------------------------- *
 * All return a term owned by the context (valid until reset), or NULL after
 * a Z3 error or when an argument is NULL. */

vd_term vd_smt_var(vd_smt *s, const char *name);     /* Real constant */
vd_term vd_smt_int_var(vd_smt *s, const char *name); /* Int constant (ids, labels) */
vd_term vd_smt_num_int(vd_smt *s, int64_t v);        /* Real numeral */
vd_term vd_smt_num_rat(vd_smt *s, const char *pq);   /* Real numeral "p/q" or "p" */
/* The double d as an EXACT rational (d = m * 2^e); NULL (and a sticky error)
 * for NaN and infinities. */
vd_term vd_smt_num_double(vd_smt *s, double d);
vd_term vd_smt_int_num(vd_smt *s, int64_t v);        /* Int numeral */

vd_term vd_smt_add(vd_smt *s, vd_term a, vd_term b);
vd_term vd_smt_sub(vd_smt *s, vd_term a, vd_term b);
vd_term vd_smt_mul(vd_smt *s, vd_term a, vd_term b);
vd_term vd_smt_div(vd_smt *s, vd_term a, vd_term b); /* real division */
vd_term vd_smt_neg(vd_smt *s, vd_term a);
/* Sum / product of n terms (n = 0 gives 0 / 1). */
vd_term vd_smt_sum(vd_smt *s, size_t n, const vd_term *t);
vd_term vd_smt_prod(vd_smt *s, size_t n, const vd_term *t);
/* a^k for an integer k (k < 0: 1 / a^-k), as a product (a polynomial). */
vd_term vd_smt_pow_int(vd_smt *s, vd_term a, int64_t k);
vd_term vd_smt_eq(vd_smt *s, vd_term a, vd_term b);  /* Bool */
vd_term vd_smt_le(vd_smt *s, vd_term a, vd_term b);  /* Bool */
vd_term vd_smt_ite(vd_smt *s, vd_term c, vd_term a, vd_term b);
vd_term vd_smt_max(vd_smt *s, vd_term a, vd_term b); /* ite(a >= b, a, b) */
/* Application of the uninterpreted function `name` with a Real result; the
 * argument sorts come from the arguments, so one name may have several
 * arities (Z3 keys declarations by name and signature). */
vd_term vd_smt_uf(vd_smt *s, const char *name, size_t n, const vd_term *args);

/* Index facts: a precondition of the real program on an index leaf of the
 * stage, lo <= leaf < hi (a label that nll_loss checks against the
 * vocabulary: the program fails on any other).  Noted by the encoders,
 * dropped by vd_smt_reset; the solver's goal assumes them and the normal
 * form writes indicators of such a leaf over its range (smt_poly_laws.c).
 * Only a free Int constant is noted (not a numeral, not a computed
 * index); facts on one leaf intersect. */
typedef struct {
  vd_term leaf;
  unsigned id; /* Z3 ast id of leaf */
  int64_t lo, hi;
} vd_smt_index_fact;
void vd_smt_note_index_range(vd_smt *s, vd_term leaf, int64_t lo, int64_t hi);
const vd_smt_index_fact *vd_smt_index_facts(const vd_smt *s, size_t *n);

/* Text of a term (for messages and tests), valid until the next call. */
const char *vd_smt_to_string(vd_smt *s, vd_term t);
/* Simplified form of t (Z3_simplify with the normal-form parameters of the
 * fast path). */
vd_term vd_smt_simplify(vd_smt *s, vd_term t);
/* If t is a numeral: 1 and its value (as a double, and as an exact "p/q"
 * into buf when buf != NULL); else 0. */
int vd_smt_numeral(vd_smt *s, vd_term t, double *v, char *buf, size_t n);

/* ---- tensors (smt_tensor.c) ---------------------------------------------- */

/* Shape plus one term per element, row-major.  The struct owns the array,
 * the context owns the terms. */
typedef struct vd_smt_tensor {
  vd_op_shape shape;
  int64_t numel;
  vd_term *t;
} vd_smt_tensor;

/* Allocates the term array for shape (terms NULL). */
vd_rc vd_smt_tensor_init(vd_smt_tensor *t, const vd_op_shape *shape);
/* Frees the array; accepts NULL and zeroed tensors. */
void vd_smt_tensor_free(vd_smt_tensor *t);
/* Fresh Real symbols named "prefix[i,j,..]" (the same name in one context is
 * the same symbol: use distinct prefixes for distinct tensors). */
vd_rc vd_smt_tensor_vars(vd_smt *s, vd_smt_tensor *t, const vd_op_shape *shape, const char *prefix,
                         vd_diag *d);
/* The same with Int symbols (token ids, labels). */
vd_rc vd_smt_tensor_int_vars(vd_smt *s, vd_smt_tensor *t, const vd_op_shape *shape, const char *prefix,
                             vd_diag *d);
/* Exact rational constants from doubles (vals has numel entries). */
vd_rc vd_smt_tensor_consts(vd_smt *s, vd_smt_tensor *t, const vd_op_shape *shape, const double *vals,
                           vd_diag *d);
/* Int numerals from doubles holding integers (rounded to nearest). */
vd_rc vd_smt_tensor_int_consts(vd_smt *s, vd_smt_tensor *t, const vd_op_shape *shape,
                               const double *vals, vd_diag *d);
/* out = src[lo:hi] (per dimension, hi exclusive); shares the terms. */
vd_rc vd_smt_tensor_slice(const vd_smt_tensor *src, const int64_t *lo, const int64_t *hi,
                          vd_smt_tensor *out, vd_diag *d);
/* out = a copy of src (the same terms). */
vd_rc vd_smt_tensor_copy(const vd_smt_tensor *src, vd_smt_tensor *out, vd_diag *d);

/* SOUNDNESS: part k of an n-way partial sum of `slice`, the parallel inputs
 * eliminated by construction: parts 0..n-2 are free Real symbols, part n-1
 * is slice - (part 0 + ... + part n-2), so the parts sum to the slice for
 * every value of the free symbols, and nothing else is assumed about them.
 * The symbols are named from (key, n, j, element), so the same (key, n)
 * gives the same parts across calls in one context: key must identify the
 * single tensor and the slice, e.g. "w1[0:4,2:4]" (see
 * vd_smt_slice_key).  n = 1 gives the slice itself. */
vd_rc vd_smt_partial_parts(vd_smt *s, const vd_smt_tensor *slice, const char *key, int64_t n,
                           int64_t k, vd_smt_tensor *out, vd_diag *d);
/* Writes "name[lo0:hi0,lo1:hi1,..]" into buf. */
void vd_smt_slice_key(char *buf, size_t size, const char *name, int32_t ndim, const int64_t *lo,
                      const int64_t *hi);

/* ---- encoders (smt_encode.c) --------------------------------------------- */

/* One symbolic execution of an operator, mirroring vd_op_call: for a
 * collective (or a send/recv pair) the merged instance, inputs and outputs
 * of all participants in group order, n_part of them.  in: borrowed
 * tensors.  out: tensors initialized by the caller with the output shapes
 * (vd_smt_tensor_init); the encoder fills their terms.  Attributes are read
 * from plan+node (node NULL: every attribute takes its default, as in
 * vd_op_eval). */
struct vd_op_encode_call {
  int op; /* vd_op_id */
  vd_smt *smt;
  const vd_plan_t *plan;
  const vd_node_t *node;
  const char *record;
  uint32_t n_in, n_out, n_part;
  const vd_smt_tensor *const *in;
  vd_smt_tensor *const *out;
  vd_diag *diag;
  /* The full-size shapes of the operands when the stage is reduced, NULL
   * otherwise: a contraction of n reduced terms that stand for N full-size
   * terms is multiplied by N/n (docs/shape-reduction.md, COUNT), so a sum
   * of a repeated term carries the full-size count. */
  const vd_op_shape *in_full, *out_full;
};

/* COUNT (docs/shape-reduction.md): a contraction whose reduced instance adds
 * `red` terms per output element where the full-size one adds `full` is
 * multiplied by full/red.  vd_smt_count_scale returns that rational, NULL
 * when they agree; vd_smt_csum is k * (t_0 + .. + t_{n-1}) (k NULL: 1). */
vd_term vd_smt_count_scale(vd_smt *s, int64_t full, int64_t red);
vd_term vd_smt_csum(vd_smt *s, vd_term k, size_t n, const vd_term *t);
/* The full-size extent of dim d of input i of an encoder call (the terms'
 * extent when the stage is not reduced). */
static inline int64_t vd_enc_full_dim(const struct vd_op_encode_call *c, uint32_t i, int32_t d) {
  return c->in_full ? c->in_full[i].d[d] : c->in[i]->shape.d[d];
}

/* A symbolic encoder.  The encoders are solver/'s expansion of ops/ops.def
 * (smt_encode.c, enc_table: one per operator, count checked at compile
 * time), not a column of vd_op_table: ops/ may not depend on solver/. */
typedef vd_rc (*vd_op_encode_fn)(const struct vd_op_encode_call *c);

/* The encoder of op (every encoder checks arity and shapes with the
 * registry's shape rule first), or NULL for an id outside the registry. */
vd_op_encode_fn vd_smt_encoder(vd_op_id op);
/* Looks up and runs the encoder; VD_EINPUT "unsupported" when none. */
vd_rc vd_smt_encode(const struct vd_op_encode_call *c);

/* The real function that an uninterpreted symbol of the encoders stands for
 * (the numeric evaluator's definition), applied to n numeric arguments:
 * 1 and *out on success, 0 for a name or arity that is not ours.  Used to
 * interpret terms numerically (tests, the numeric cross-check) and to
 * document the symbols in one place:
 *   exp log sqrt rsqrt sigmoid tanh gelu gelu_grad (x);  pow (x, e);
 *   rope_cos / rope_sin (pos, i, d, theta) = cos/sin(pos * theta^(-2i/d));
 *   rot_cos / rot_sin (theta) = cos/sin(theta), theta a freqs_cis element (apply_rotary_emb);
 *   clip_coef (total_sq, max_norm) = min(1, max_norm / (sqrt(total_sq) + 1e-6));
 *   dropout_mask (x, p) = (1 + 0.5 sin(3x)) / (1 - p), 0 for p >= 1 (a surrogate of the mask);
 *   topk_gate.k<K>.j<J> (row of e logits): gate J of the row;
 *   topk_gate_backward.k<K>.j<J> (row of e logits, row of e grads);
 *   gate_fw.<score>.g<G>.tg<TG>.k<K>.b<B>.{idx.j<J>, w.j<J>, jac.e<E>.j<J>} (row of e logits,
 *   then the bias row when B = 1): routing index, normalised weight, d weight_J / d logit_E
 *   of nnScaler's gate_fw (ops/ops_moe.c). */
int vd_smt_uf_value(const char *name, size_t n, const double *args, double *out);

/* ---- equivalence check (smt_check.c) ------------------------------------- */

typedef enum {
  VD_SMT_EQUIVALENT = 0,
  VD_SMT_NOT_EQUIVALENT,
  VD_SMT_INCONCLUSIVE,
} vd_smt_verdict;

typedef struct {
  char *name;   /* symbol name */
  char *exact;  /* exact value: "p/q", "p", or a decimal approximation ending in '?' for an algebraic number */
  double value; /* nearest double */
} vd_smt_value;

typedef struct {
  size_t index;           /* position in the pair arrays */
  vd_smt_value parallel;  /* name = NULL */
  vd_smt_value single;    /* name = NULL */
} vd_smt_diff;

/* Which limit made a check inconclusive. */
typedef enum {
  VD_SMT_LIMIT_NONE = 0,
  VD_SMT_LIMIT_BUDGET, /* deterministic: Z3's rlimit (the normal form's budget only makes pairs undecided) */
  VD_SMT_LIMIT_WALL,   /* the wall-clock backstop */
} vd_smt_limit;

extern const char *const vd_smt_limit_names[3];

typedef struct {
  vd_smt_verdict verdict;
  vd_smt_limit limit;     /* inconclusive: the limit hit, if any */
  uint64_t nf_steps;      /* normal-form steps used */
  int nf_gave_up;         /* the normal form ran out of budget */
  uint64_t rlimit_used;   /* Z3 resource units used by the solver path */
  int by_fast_path;       /* 1 when the simplifier alone proved every pair */
  size_t n_fast;          /* pairs proved by the fast path */
  char reason[160];       /* inconclusive: "timeout", "unknown: ..." */
  vd_smt_value *inputs;   /* not equivalent: free symbols, sorted by name */
  size_t n_inputs;
  vd_smt_diff *diffs;     /* not equivalent: every pair that differs in the model */
  size_t n_diffs;
  double ms_fast, ms_solver; /* wall time of each path */
  /* Cross-check of a normal-form proof (vd_smt_set_cross_check): 0 not
   * asked or not a normal-form proof, VD_SMT_CROSS_AGREE Z3 proved it too,
   * VD_SMT_CROSS_UNKNOWN Z3 did not decide (the proof stands),
   * VD_SMT_CROSS_DISAGREE Z3 found a counterexample (verdict INCONCLUSIVE). */
  int cross;
} vd_smt_result;

enum { VD_SMT_CROSS_NONE = 0, VD_SMT_CROSS_AGREE, VD_SMT_CROSS_UNKNOWN, VD_SMT_CROSS_DISAGREE };

/* Decides whether par[i] = single[i] for all i, for every value of the free
 * symbols and every interpretation of the uninterpreted functions.
 * EQUIVALENT only on a proof (simplified forms identical, or the solver says
 * unsat); NOT_EQUIVALENT with a model (sat); INCONCLUSIVE on unknown or
 * timeout, never equivalent.  res is initialized here (free it with
 * vd_smt_result_free).  Errors: VD_EINTERNAL on a Z3 error (message in d),
 * VD_ENOMEM.  Cost: simplification is linear in the term DAGs; the solver
 * path is bounded by the timeout. */
vd_rc vd_smt_check(vd_smt *s, const vd_term *par, const vd_term *single, size_t n,
                   vd_smt_result *res, vd_diag *d);
void vd_smt_result_free(vd_smt_result *r);
const char *vd_smt_verdict_name(vd_smt_verdict v);

/* ---- certificates (smt_cert.c) ------------------------------------------- */

typedef struct {
  size_t n_pairs;  /* pairs in the goal (pairs of the same term are left out: equal) */
  size_t n_defs;   /* define-fun lines (compound subterms) */
  size_t n_decls;  /* free symbols and kernels declared */
} vd_smt_cert_stats;

/* Writes the obligation "some par[i] differs from single[i]" as a
 * standalone SMT-LIB2 script to out (header: comment lines, may be NULL):
 * unsat exactly when vd_smt_check may say equivalent (docs/verifier.md
 * section 9 gives the layout).  Errors: VD_EINTERNAL for a term the printer
 * has no SMT-LIB2 form for, VD_ENOMEM, VD_EIO. */
vd_rc vd_smt_write_obligation(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, const char *header,
                              FILE *out, vd_smt_cert_stats *stats, vd_diag *d);
/* Runs Z3 (the library, a fresh context) on an SMT-LIB2 script; answer
 * receives the last line it printed ("unsat", "sat", "unknown", or
 * "error: ..."). */
vd_rc vd_smt_run_script(const char *text, unsigned timeout_ms, char *answer, size_t n, vd_diag *d);

/* Cross-check (verdict --cross-check, the soundness fuzzer): every check
 * that the normal form decides equivalent is also given to Z3's solver; a
 * disagreement makes the check INCONCLUSIVE with an internal-error reason
 * (vd_smt_result.cross). */
void vd_smt_set_cross_check(vd_smt *s, int on);
/* Disagreements of the cross-check in this process so far (any stage, any
 * round: a stage whose candidate is dropped afterwards still counts). */
size_t vd_smt_cross_disagreements(void);

/* ---- internal to solver/smt*.c (not for other modules) ------------------- */

struct _Z3_context;
struct _Z3_params;
struct _Z3_context *vd_smt_i_z3(vd_smt *s);
/* Checks Z3's error code after a call that returned r: on error (or r NULL)
 * records it and returns NULL; else inc_refs r into the arena and returns it. */
vd_term vd_smt_i_keep(vd_smt *s, vd_term r);
/* Records a sticky error of ours (e.g. a NaN constant); returns NULL. */
vd_term vd_smt_i_fail(vd_smt *s, const char *msg);
int vd_smt_i_failed(vd_smt *s);
/* Z3 ran out of memory in this context (or in any: the run must end). */
int vd_smt_i_oom(vd_smt *s);
/* Forgets a sticky error (after a deliberate interruption: the terms made
 * before it are intact). */
void vd_smt_i_clear_error(vd_smt *s);
/* 1 when t has sort Int (index-valued inputs). */
int vd_smt_i_is_int(vd_smt *s, vd_term t);
/* One step of xorshift64 (13, 7, 17) on *st, which must not be 0; returns
 * the new state.  The random witness (smt_check_witness.c) and the
 * counterexample's numeric replay (stage_solve_cex.c) draw from it. */
static inline uint64_t vd_smt_i_xorshift(uint64_t *st) {
  *st ^= *st << 13;
  *st ^= *st >> 7;
  *st ^= *st << 17;
  return *st;
}
unsigned vd_smt_i_timeout(const vd_smt *s);
/* goal and the index facts of the stage (goal itself when there are none).
 * laws_used: the last normal form used the laws of exp and log (the
 * cross-check then leaves the proof undecided; certificates state them). */
vd_term vd_smt_i_assume_facts(vd_smt *s, vd_term goal);
void vd_smt_i_set_laws_used(vd_smt *s, int on);
int vd_smt_i_laws_used(const vd_smt *s);
uint64_t vd_smt_i_nf_budget(const vd_smt *s);
uint64_t vd_smt_i_rlimit(const vd_smt *s);
void vd_smt_i_orphan_add(int delta);

/* The polynomial normal form (smt_poly.c): one per check, over the terms
 * of s.  budget: steps (0 = unlimited).  vd_smt_nf_of gives the interned
 * id of t's normal form, or -1 once the budget (or the coefficient size
 * bound) is exhausted, which is sticky; VD_ENOMEM.  Equal ids prove equal
 * terms (see SOUNDNESS in smt_poly.c). */
typedef struct vd_smt_nf vd_smt_nf;
vd_rc vd_smt_nf_new(vd_smt_nf **out, vd_smt *s, uint64_t budget);
void vd_smt_nf_free(vd_smt_nf *nf);
vd_rc vd_smt_nf_of(vd_smt_nf *nf, vd_term t, int64_t *id);
/* Structural mode: a product of two sums of several terms is never
 * distributed (it stays an atom keyed by its factors' normal forms), so no
 * product grows past the sum of its factors' sizes; it proves the pairs
 * that differ by regrouping sums (accumulations, reductions) of the same
 * products, and by distributing monomials. */
void vd_smt_nf_set_structural(vd_smt_nf *nf, int on);
/* Counts the uses of every node under roots (the terms about to be
 * normalised), so that a sum used by one sum only is added into it
 * directly instead of being normalised on its own (same forms, less work:
 * accumulation chains cost linear instead of quadratic time).  Optional. */
vd_rc vd_smt_nf_prepare(vd_smt_nf *nf, const vd_term *roots, size_t n_roots);
/* *eq = 1 when a and b are the same linear combination (numeral
 * coefficients) of the same subterms, seen through every sum and numeral
 * scaling; the subterms themselves are not normalised.  Charges the walk
 * to the budget; 0 on a difference or an exhausted budget. */
vd_rc vd_smt_nf_same_sum(vd_smt_nf *nf, vd_term a, vd_term b, int *eq);
uint64_t vd_smt_nf_steps(const vd_smt_nf *nf);
int vd_smt_nf_gave_up(const vd_smt_nf *nf);
/* 1 when a law of exp, log or the index facts proved a step (smt_poly_laws.c). */
int vd_smt_nf_laws_used(const vd_smt_nf *nf);
/* Runs the normal form over the pairs to learn whether its laws rewrite
 * them (vd_smt_i_laws_used afterwards): the certificate states the laws
 * of an obligation written without a check. */
vd_rc vd_smt_nf_note_laws(vd_smt *s, const vd_term *par, const vd_term *single, size_t n);
uint64_t vd_smt_i_seed(const vd_smt *s);
int vd_smt_i_fast_path(const vd_smt *s);
int vd_smt_i_witness_first(const vd_smt *s);
int vd_smt_i_cross_check(const vd_smt *s);

#endif
