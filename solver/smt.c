/*
 * solver/smt.c - the per-thread Z3 context of verdict and the term wrappers.
 *
 * Implements: context lifetime (Z3_mk_context_rc), the term arena that keeps
 * reference counting inside this file, the no-op error handler plus sticky
 * error recording, exact numerals (doubles converted to rationals without
 * rounding), and the arithmetic / uninterpreted-function constructors the
 * encoders use.  Not here: tensors (smt_tensor.c), operators
 * (smt_encode.c), the check (smt_check.c).
 *
 * Invariants:
 *  - every vd_term handed out is in the arena with exactly one reference
 *    taken by us; vd_smt_reset drops them all;
 *  - after the first Z3 error every wrapper returns NULL until reset (a
 *    partially built expression is never mistaken for a whole one);
 *  - Z3's default error handler exits the process: we replace it before the
 *    first other call.
 */
#include "smt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <unistd.h>
#include <z3.h>

#include "../common/limits.h"
#include "../common/mem.h"

#define RESETS_PER_CONTEXT 64

struct vd_smt {
  Z3_context z;
  Z3_sort real, integer;
  Z3_params simp;
  Z3_ast *arena;
  size_t n_arena, cap_arena;
  unsigned timeout_ms;
  uint64_t nf_steps, rlimit;
  uint64_t seed;   /* of the random witness (smt_check.c) */
  int fast_path;
  int witness_first;
  int cross_check;
  int failed;
  char err[256];
  unsigned resets;
  int oom; /* Z3 ran out of memory in this context: it is never touched again */
  /* Function declarations by (name, argument sorts), referenced, for the
   * life of the context: an MoE gate backward applies hundreds of symbols
   * of 64 arguments per token, and rebuilding each declaration (name
   * symbol, domain) per application was most of its encoding time. */
  struct decl_entry {
    uint64_t hash;
    char *name;
    unsigned n;
    Z3_sort *dom;
    Z3_func_decl f;
  } *decls;
  size_t n_decls, cap_decls; /* open addressing, cap a power of two */
  /* Index facts of the current stage (vd_smt_note_index_range): the leaf
   * (an Int constant, referenced through the arena) and its range. */
  vd_smt_index_fact *facts;
  size_t n_facts, cap_facts;
  int laws_used; /* the last normal form used the laws of exp and log (smt_poly_laws.c) */
};

/* ---- out of memory ------------------------------------------------------------
 * Z3 reports an allocation failure by throwing out_of_memory_error from its
 * allocator (memory_manager.cpp), wherever the allocation happens: in the
 * middle of inserting a node into the AST table, of deleting a node during
 * Z3_dec_ref, of growing a hash table.  Z3 is not exception-safe there: the
 * API catches the exception (error code Z3_MEMOUT_FAIL) but the context can
 * be left half-updated, and the next call into it (our arena's Z3_dec_ref in
 * vd_smt_reset, a Z3_mk_const) frees an invalid pointer or faults.  Worse,
 * several of our paths cleared the error code (Z3_set_error(z, Z3_OK)) and
 * kept using the context.  So:
 *  - the error handler records Z3_MEMOUT_FAIL on the calling thread (a
 *    context is only ever used by the thread that owns it) and in a
 *    process-wide flag; the vd_smt picks it up at its next wrapper call;
 *  - a context that ran out of memory is never called again, not even to
 *    release it: it is parked, still reachable, in `graveyard` (the process
 *    is about to end with "out of memory"; a leak report would be noise);
 *  - once any context ran out of memory every vd_smt refuses to build terms
 *    (vd_smt_out_of_memory), so the other threads stop at their next
 *    wrapper call and the run ends in exit 3 instead of racing on;
 *  - Z3's own ceiling (memory_max_size, counted over all contexts) is set
 *    below the address-space limit of the process, so that Z3's accounting
 *    trips before malloc fails: a failing malloc inside libstdc++ (operator
 *    new in Z3's std:: containers) throws std::bad_alloc, which Z3's API
 *    does not catch and which aborts the process. */
static _Thread_local int tls_memout;
static atomic_int any_memout;
/* Set (never cleared) when Z3's estimated use nears its ceiling: no
 * exception happened, every context is whole, but the run must stop before
 * Z3 throws (see z3_near_ceiling). */
static atomic_int near_memout;
static unsigned long long z3_ceiling_bytes; /* written once, under z3_global_once */

#define GRAVEYARD_MAX 256
static Z3_context graveyard[GRAVEYARD_MAX];
static atomic_size_t n_graveyard;

static void on_error(Z3_context c, Z3_error_code e) {
  (void)c;
  if (e == Z3_MEMOUT_FAIL) {
    tls_memout = 1;
    atomic_store(&any_memout, 1);
  }
}

static void set_err(vd_smt *s, const char *msg) {
  if (s->failed) return;
  s->failed = 1;
  snprintf(s->err, sizeof(s->err), "%s", msg ? msg : "unknown Z3 error");
}

/* Folds a memory failure reported by Z3 on this thread, or by any other
 * context, into s.  Returns s->oom. */
static int note_memout(vd_smt *s) {
  if (tls_memout || (atomic_load(&any_memout) && s->z)) {
    tls_memout = 0;
    if (!s->oom) {
      s->failed = 0;
      set_err(s, "out of memory (Z3)");
    }
    s->oom = 1;
  }
  return s->oom;
}

int vd_smt_out_of_memory(void) { return atomic_load(&any_memout) || atomic_load(&near_memout); }

/* Z3's allocator throws at its ceiling wherever the allocation happens,
 * and Z3 is not exception-safe everywhere (a context constructor that
 * throws half-way was seen to fault).  So we stop short of the ceiling:
 * a new context (about 20 MB of Z3's tables) is only made, and a stage only
 * started, while Z3's estimated use plus `reserve` stays below 90% of it. */
static int z3_near_ceiling(unsigned long long reserve) {
  unsigned long long used = Z3_get_estimated_alloc_size();
  if (used + reserve <= z3_ceiling_bytes / 10 * 9) return 0;
  atomic_store(&near_memout, 1);
  return 1;
}

/* Abandons a context that ran out of memory: no Z3 call may touch it. */
static void decls_clear(vd_smt *s, int release);
static void park_context(vd_smt *s) {
  decls_clear(s, 0);
  if (!s->z) return;
  size_t k = atomic_fetch_add(&n_graveyard, 1);
  if (k < GRAVEYARD_MAX) graveyard[k] = s->z;
  s->z = NULL;
  s->n_arena = 0;
  s->simp = NULL;
  s->real = s->integer = NULL;
}

/* Forgets the declaration cache; with release, drops our references
 * (never on a parked context: no Z3 call may touch it). */
static void decls_clear(vd_smt *s, int release) {
  for (size_t i = 0; i < s->cap_decls; i++) {
    struct decl_entry *e = &s->decls[i];
    if (!e->name) continue;
    if (release && s->z) Z3_dec_ref(s->z, Z3_func_decl_to_ast(s->z, e->f));
    vd_free(e->name);
    vd_free(e->dom);
  }
  vd_free(s->decls);
  s->decls = NULL;
  s->n_decls = s->cap_decls = 0;
}

static void drop_context(vd_smt *s) {
  if (note_memout(s)) {
    decls_clear(s, 0);
    park_context(s);
    return;
  }
  decls_clear(s, 1);
  if (!s->z) return;
  for (size_t i = 0; i < s->n_arena; i++) Z3_dec_ref(s->z, s->arena[i]);
  s->n_arena = 0;
  if (s->simp) Z3_params_dec_ref(s->z, s->simp);
  if (s->real) Z3_dec_ref(s->z, Z3_sort_to_ast(s->z, s->real));
  if (s->integer) Z3_dec_ref(s->z, Z3_sort_to_ast(s->z, s->integer));
  Z3_del_context(s->z);
  s->z = NULL;
  s->simp = NULL;
  s->real = s->integer = NULL;
}

/* Address space left under `ulimit -v` (RLIMIT_AS), or ULLONG_MAX. */
static unsigned long long address_space_left(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return ~0ull;
  unsigned long long used = 0, pages;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f && fscanf(f, "%llu", &pages) == 1) used = pages * (unsigned long long)sysconf(_SC_PAGESIZE);
  if (f) fclose(f);
  return (unsigned long long)rl.rlim_cur > used ? (unsigned long long)rl.rlim_cur - used : 0;
}

static pthread_once_t z3_global_once = PTHREAD_ONCE_INIT;
static void z3_global_setup(void) {
  /* 6 GB, or two thirds of the address space left under `ulimit -v` (the
   * rest is our own data, thread stacks and the libraries), whichever is
   * smaller; see "out of memory" above. */
  unsigned long long mb = VD_LIM_Z3_MEMORY_MB;
  unsigned long long left = address_space_left();
  if (left != ~0ull) {
    /* 16 MB for the watchdog threads' stacks, then two thirds for Z3. */
    left = left > (16ull << 20) ? left - (16ull << 20) : 0;
    unsigned long long cap = left / 3 * 2 / (1024 * 1024);
    if (cap < 4) cap = 4;
    if (cap < mb) mb = cap;
  }
  char text[32];
  snprintf(text, sizeof(text), "%llu", mb);
  /* Test hook: VERDICT_Z3_MEMORY_MB overrides the ceiling, so that a test
   * can let malloc fail inside Z3 first (the parking path above). */
  const char *env = getenv("VERDICT_Z3_MEMORY_MB");
  if (env && strspn(env, "0123456789") == strlen(env) && strlen(env) > 0 && strlen(env) < 10)
    snprintf(text, sizeof(text), "%s", env);
  Z3_global_param_set("memory_max_size", text);
  /* Z3's model evaluator charges no resource limit and ignores the
   * solver's rlimit: this caps every evaluation (smt_check.c) at a step
   * count, read by each model when it is made, so it is set here once,
   * before any context exists. */
  snprintf(text, sizeof(text), "%d", (int)VD_LIM_EVAL_MAX_STEPS);
  Z3_global_param_set("model_evaluator.max_steps", text);
  z3_ceiling_bytes = strtoull(text, NULL, 10) << 20;
}

/* Context creation is serialized: two constructors racing near the
 * ceiling would both pass the check below. */
static pthread_mutex_t make_mu = PTHREAD_MUTEX_INITIALIZER;
#define CONTEXT_RESERVE (24ull << 20)

static vd_rc make_context(vd_smt *s, vd_diag *d) {
  pthread_once(&z3_global_once, z3_global_setup);
  if (vd_smt_out_of_memory()) return VD_OOM(d);
  pthread_mutex_lock(&make_mu);
  /* The constructor is where a failing malloc was seen to fault: it is only
   * entered with room for it in the address space as well. */
  if (z3_near_ceiling(CONTEXT_RESERVE) || address_space_left() < 2 * CONTEXT_RESERVE) {
    atomic_store(&near_memout, 1);
    pthread_mutex_unlock(&make_mu);
    return VD_ERR(d, VD_ENOMEM, NULL, "z3", NULL, "out of memory (Z3 memory ceiling reached)");
  }
  Z3_config cfg = Z3_mk_config();
  if (cfg) {
    Z3_set_param_value(cfg, "model", "true");
    s->z = Z3_mk_context_rc(cfg);
    Z3_del_config(cfg);
  }
  pthread_mutex_unlock(&make_mu);
  /* Z3_mk_context_rc fails only when it cannot allocate the context. */
  if (!s->z) return VD_ERR(d, VD_ENOMEM, NULL, "z3", NULL, "out of memory (Z3_mk_context_rc failed)");
  Z3_set_error_handler(s->z, on_error);
  s->real = Z3_mk_real_sort(s->z);
  s->integer = Z3_mk_int_sort(s->z);
  Z3_inc_ref(s->z, Z3_sort_to_ast(s->z, s->real));
  Z3_inc_ref(s->z, Z3_sort_to_ast(s->z, s->integer));
  /* Fast-path normal form: "som" puts polynomials in sum-of-monomials form
   * with sorted monomials, so equal polynomials get the same hash-consed
   * AST; the other defaults (flat, arith canonical ordering) stay on. */
  s->simp = Z3_mk_params(s->z);
  Z3_params_inc_ref(s->z, s->simp);
  Z3_params_set_bool(s->z, s->simp, Z3_mk_string_symbol(s->z, "som"), true);
  /* A deterministic bound on the simplifier's work (rewrite steps); past it
   * the simplification fails and the pairs stay open. */
  Z3_params_set_uint(s->z, s->simp, Z3_mk_string_symbol(s->z, "max_steps"), (unsigned)VD_LIM_SIMP_MAX_STEPS);
  Z3_params_set_uint(s->z, s->simp, Z3_mk_string_symbol(s->z, "som_blowup"), (unsigned)VD_LIM_SOM_BLOWUP);
  if (Z3_get_error_code(s->z) != Z3_OK || note_memout(s)) {
    vd_rc rc = s->oom ? VD_OOM(d)
                      : VD_ERR(d, VD_EINTERNAL, NULL, "z3", "params", "%s",
                               Z3_get_error_msg(s->z, Z3_get_error_code(s->z)));
    drop_context(s);
    return rc;
  }
  return VD_OK;
}

vd_rc vd_smt_new(vd_smt **out, vd_diag *d) {
  *out = NULL;
  vd_smt *s = vd_calloc(1, sizeof(*s));
  if (!s) return VD_OOM(d);
  s->timeout_ms = VD_LIM_STAGE_TIMEOUT_MS;
  s->nf_steps = VD_SMT_DEFAULT_NF_STEPS;
  s->rlimit = VD_SMT_DEFAULT_RLIMIT;
  s->seed = VD_LIM_SEED;
  s->fast_path = 1;
  vd_rc rc = make_context(s, d);
  if (rc != VD_OK) {
    vd_free(s);
    return rc;
  }
  *out = s;
  return VD_OK;
}

void vd_smt_free(vd_smt *s) {
  if (!s) return;
  drop_context(s);
  vd_free(s->facts);
  vd_free(s->arena);
  vd_free(s);
}

vd_rc vd_smt_reset(vd_smt *s, vd_diag *d) {
  if (note_memout(s)) {
    /* The context may be half-updated: never call into it again.  The run
     * ends (vd_smt_out_of_memory), so no new context is made either. */
    park_context(s);
    return VD_OOM(d);
  }
  if (!s->z) {
    /* A previous recreation failed: try again. */
    s->failed = 0;
    s->err[0] = '\0';
    vd_rc rc = make_context(s, d);
    if (rc != VD_OK) set_err(s, "could not recreate the Z3 context");
    return rc;
  }
  /* Z3_dec_ref may delete nodes and so allocate (its deletion worklist):
   * stop at the first failure instead of walking a damaged context. */
  for (size_t i = 0; i < s->n_arena; i++) {
    Z3_dec_ref(s->z, s->arena[i]);
    if (note_memout(s)) {
      park_context(s);
      return VD_OOM(d);
    }
  }
  s->n_arena = 0;
  s->n_facts = 0;
  s->laws_used = 0;
  s->failed = 0;
  s->err[0] = '\0';
  if (z3_near_ceiling(0)) return VD_ERR(d, VD_ENOMEM, NULL, "z3", NULL, "out of memory (Z3 memory ceiling reached)");
  if (++s->resets % RESETS_PER_CONTEXT == 0) {
    drop_context(s);
    vd_rc rc = make_context(s, d);
    /* Without a context every wrapper must refuse: they all test `failed`
     * before touching s->z. */
    if (rc != VD_OK) set_err(s, "could not recreate the Z3 context");
    return rc;
  }
  return VD_OK;
}

void vd_smt_set_timeout(vd_smt *s, unsigned ms) { s->timeout_ms = ms; }
void vd_smt_set_fast_path(vd_smt *s, int on) { s->fast_path = on != 0; }
void vd_smt_set_witness_first(vd_smt *s, int on) { s->witness_first = on != 0; }
void vd_smt_set_cross_check(vd_smt *s, int on) { s->cross_check = on != 0; }
void vd_smt_set_budget(vd_smt *s, uint64_t nf_steps, uint64_t rlimit) {
  s->nf_steps = nf_steps;
  s->rlimit = rlimit;
}

/* The one process-wide counter of this module: abandoned checks are
 * process state by nature (their threads outlive every context). */
static size_t orphan_count;
void vd_smt_i_orphan_add(int delta) {
  if (delta > 0) __atomic_add_fetch(&orphan_count, (size_t)delta, __ATOMIC_SEQ_CST);
  else __atomic_sub_fetch(&orphan_count, (size_t)-delta, __ATOMIC_SEQ_CST);
}
size_t vd_smt_orphans(void) { return __atomic_load_n(&orphan_count, __ATOMIC_SEQ_CST); }
void vd_smt_set_seed(vd_smt *s, uint64_t seed) { s->seed = seed; }

vd_rc vd_smt_status(vd_smt *s, vd_diag *d, const char *what) {
  if (note_memout(s)) return vd_diag_set(d, VD_ENOMEM, __FILE__, __LINE__, NULL, what, NULL, "out of memory (Z3)");
  if (!s->failed) return VD_OK;
  return vd_diag_set(d, VD_EINTERNAL, __FILE__, __LINE__, NULL, what, NULL, "Z3: %s", s->err);
}

const char *vd_smt_error(const vd_smt *s) { return s->err; }
size_t vd_smt_term_count(const vd_smt *s) { return s->n_arena; }

/* ---- internal ------------------------------------------------------------ */

Z3_context vd_smt_i_z3(vd_smt *s) { return s->z; }
int vd_smt_i_failed(vd_smt *s) { return note_memout(s) || s->failed; }
int vd_smt_i_oom(vd_smt *s) { return note_memout(s); }
void vd_smt_i_clear_error(vd_smt *s) {
  /* An allocation failure is never cleared: the context is finished. */
  if (note_memout(s)) return;
  if (Z3_get_error_code(s->z) != Z3_OK) Z3_set_error(s->z, Z3_OK);
  s->failed = 0;
  s->err[0] = '\0';
}
int vd_smt_i_is_int(vd_smt *s, vd_term t) {
  return t && Z3_get_sort_kind(s->z, Z3_get_sort(s->z, t)) == Z3_INT_SORT;
}
unsigned vd_smt_i_timeout(const vd_smt *s) { return s->timeout_ms; }
uint64_t vd_smt_i_nf_budget(const vd_smt *s) { return s->nf_steps; }
uint64_t vd_smt_i_rlimit(const vd_smt *s) { return s->rlimit; }
uint64_t vd_smt_i_seed(const vd_smt *s) { return s->seed; }
int vd_smt_i_fast_path(const vd_smt *s) { return s->fast_path; }
int vd_smt_i_witness_first(const vd_smt *s) { return s->witness_first; }
int vd_smt_i_cross_check(const vd_smt *s) { return s->cross_check; }

vd_term vd_smt_i_fail(vd_smt *s, const char *msg) {
  set_err(s, msg);
  return NULL;
}

vd_term vd_smt_i_keep(vd_smt *s, vd_term r) {
  if (note_memout(s)) return NULL;
  Z3_error_code e = Z3_get_error_code(s->z);
  if (e != Z3_OK) {
    set_err(s, Z3_get_error_msg(s->z, e));
    return NULL;
  }
  if (!r) return vd_smt_i_fail(s, "Z3 returned no term");
  if (s->n_arena == s->cap_arena && VD_GROW(s->arena, s->cap_arena, s->n_arena + 1) != 0)
    return vd_smt_i_fail(s, "out of memory (term arena)");
  Z3_inc_ref(s->z, r);
  s->arena[s->n_arena++] = r;
  return r;
}

#define KEEP(expr) vd_smt_i_keep(s, (expr))
#define LIVE(x) (!vd_smt_i_failed(s) && (x) != NULL)

/* ---- numerals ------------------------------------------------------------ */

vd_term vd_smt_var(vd_smt *s, const char *name) {
  if (vd_smt_i_failed(s)) return NULL;
  return KEEP(Z3_mk_const(s->z, Z3_mk_string_symbol(s->z, name), s->real));
}

vd_term vd_smt_int_var(vd_smt *s, const char *name) {
  if (vd_smt_i_failed(s)) return NULL;
  return KEEP(Z3_mk_const(s->z, Z3_mk_string_symbol(s->z, name), s->integer));
}

vd_term vd_smt_num_int(vd_smt *s, int64_t v) {
  if (vd_smt_i_failed(s)) return NULL;
  return KEEP(Z3_mk_int64(s->z, v, s->real));
}

vd_term vd_smt_int_num(vd_smt *s, int64_t v) {
  if (vd_smt_i_failed(s)) return NULL;
  return KEEP(Z3_mk_int64(s->z, v, s->integer));
}

vd_term vd_smt_num_rat(vd_smt *s, const char *pq) {
  if (vd_smt_i_failed(s)) return NULL;
  return KEEP(Z3_mk_numeral(s->z, pq, s->real));
}

/* Decimal digits of m * 2^e (m >= 0, e >= 0) into buf.  Limbs are base 1e9,
 * little-endian; at most 1024 + 64 bits = 328 digits, 37 limbs. */
static void big_dec(uint64_t m, int e, char *buf, size_t size) {
  uint32_t limb[48];
  int n = 0;
  do {
    limb[n++] = (uint32_t)(m % 1000000000u);
    m /= 1000000000u;
  } while (m);
  while (e > 0) {
    int sh = e > 28 ? 28 : e;
    uint64_t carry = 0;
    for (int i = 0; i < n; i++) {
      uint64_t v = ((uint64_t)limb[i] << sh) + carry;
      limb[i] = (uint32_t)(v % 1000000000u);
      carry = v / 1000000000u;
    }
    while (carry) {
      limb[n++] = (uint32_t)(carry % 1000000000u);
      carry /= 1000000000u;
    }
    e -= sh;
  }
  size_t at = (size_t)snprintf(buf, size, "%u", limb[n - 1]);
  for (int i = n - 2; i >= 0 && at < size; i--) at += (size_t)snprintf(buf + at, size - at, "%09u", limb[i]);
}

vd_term vd_smt_num_double(vd_smt *s, double d) {
  if (vd_smt_i_failed(s)) return NULL;
  if (!isfinite(d)) return vd_smt_i_fail(s, "a constant is NaN or infinite (no real value)");
  if (d == 0) return vd_smt_num_int(s, 0);
  /* d = f * 2^e with 0.5 <= |f| < 1; f * 2^53 is an integer exactly. */
  int e;
  double f = frexp(fabs(d), &e);
  uint64_t m = (uint64_t)ldexp(f, 53);
  e -= 53;
  while ((m & 1u) == 0 && e < 0) {
    m >>= 1;
    e++;
  }
  char num[400], den[400], text[820];
  if (e >= 0) {
    big_dec(m, e, num, sizeof(num));
    snprintf(text, sizeof(text), "%s%s", d < 0 ? "-" : "", num);
  } else {
    big_dec(m, 0, num, sizeof(num));
    big_dec(1, -e, den, sizeof(den));
    snprintf(text, sizeof(text), "%s%s/%s", d < 0 ? "-" : "", num, den);
  }
  return vd_smt_num_rat(s, text);
}

/* ---- arithmetic ---------------------------------------------------------- */

/* Z3's n-ary arithmetic constructors (Z3_mk_add, Z3_mk_sub, Z3_mk_mul). */
typedef Z3_ast (*z3_nary)(Z3_context, unsigned, const Z3_ast[]);

static vd_term binary(vd_smt *s, z3_nary mk, vd_term a, vd_term b) {
  if (!LIVE(a) || !LIVE(b)) return NULL;
  Z3_ast v[2] = {a, b};
  return KEEP(mk(s->z, 2, v));
}

vd_term vd_smt_add(vd_smt *s, vd_term a, vd_term b) { return binary(s, Z3_mk_add, a, b); }
vd_term vd_smt_sub(vd_smt *s, vd_term a, vd_term b) { return binary(s, Z3_mk_sub, a, b); }
vd_term vd_smt_mul(vd_smt *s, vd_term a, vd_term b) { return binary(s, Z3_mk_mul, a, b); }

vd_term vd_smt_div(vd_smt *s, vd_term a, vd_term b) {
  if (!LIVE(a) || !LIVE(b)) return NULL;
  return KEEP(Z3_mk_div(s->z, a, b));
}

vd_term vd_smt_neg(vd_smt *s, vd_term a) {
  if (!LIVE(a)) return NULL;
  return KEEP(Z3_mk_unary_minus(s->z, a));
}

static int all_live(const vd_smt *s, size_t n, const vd_term *t) {
  if (vd_smt_i_failed((vd_smt *)s)) return 0;
  for (size_t i = 0; i < n; i++)
    if (!t[i]) return 0;
  return 1;
}

/* The sum (mk Z3_mk_add, unit 0) or product (Z3_mk_mul, unit 1) of t[0..n);
 * what names it in the limit's message. */
static vd_term nary(vd_smt *s, z3_nary mk, int unit, const char *what, size_t n, const vd_term *t) {
  if (!all_live(s, n, t)) return NULL;
  if (n == 0) return vd_smt_num_int(s, unit);
  if (n == 1) return t[0];
  if (n > UINT32_MAX) {
    char msg[64];
    snprintf(msg, sizeof(msg), "%s of more than 2^32 terms", what);
    return vd_smt_i_fail(s, msg);
  }
  return KEEP(mk(s->z, (unsigned)n, (Z3_ast *)t));
}

vd_term vd_smt_sum(vd_smt *s, size_t n, const vd_term *t) { return nary(s, Z3_mk_add, 0, "sum", n, t); }
vd_term vd_smt_prod(vd_smt *s, size_t n, const vd_term *t) { return nary(s, Z3_mk_mul, 1, "product", n, t); }

vd_term vd_smt_pow_int(vd_smt *s, vd_term a, int64_t k) {
  if (!LIVE(a)) return NULL;
  if (k == 0) return vd_smt_num_int(s, 1);
  int64_t m = k < 0 ? -k : k;
  if (m > 64) return vd_smt_i_fail(s, "integer exponent above 64 (not expanded)");
  vd_term f[64];
  for (int64_t i = 0; i < m; i++) f[i] = a;
  vd_term p = vd_smt_prod(s, (size_t)m, f);
  return k < 0 ? vd_smt_div(s, vd_smt_num_int(s, 1), p) : p;
}

vd_term vd_smt_eq(vd_smt *s, vd_term a, vd_term b) {
  if (!LIVE(a) || !LIVE(b)) return NULL;
  return KEEP(Z3_mk_eq(s->z, a, b));
}

vd_term vd_smt_le(vd_smt *s, vd_term a, vd_term b) {
  if (!LIVE(a) || !LIVE(b)) return NULL;
  return KEEP(Z3_mk_le(s->z, a, b));
}

vd_term vd_smt_ite(vd_smt *s, vd_term c, vd_term a, vd_term b) {
  if (!LIVE(c) || !LIVE(a) || !LIVE(b)) return NULL;
  return KEEP(Z3_mk_ite(s->z, c, a, b));
}

vd_term vd_smt_max(vd_smt *s, vd_term a, vd_term b) {
  return vd_smt_ite(s, vd_smt_le(s, b, a), a, b);
}

/* The declaration of name over dom[0..n) -> Real, from the cache or made
 * (and referenced by the cache).  Declarations are hash-consed by Z3 by
 * (name, signature): the same name and sorts give the same function in
 * every call, which is what makes the symbol shared by both graphs; the
 * cache only saves rebuilding it.  NULL on a Z3 error. */
static Z3_func_decl decl_of(vd_smt *s, const char *name, unsigned n, const Z3_sort *dom, int *owned) {
  *owned = 0;
  uint64_t h = 1469598103934665603ull;
  for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  for (unsigned i = 0; i < n; i++) h = (h ^ (uint64_t)(uintptr_t)dom[i]) * 1099511628211ull;
  h ^= n;
  if (s->cap_decls) {
    size_t j = (size_t)(h * 0x9e3779b97f4a7c15ull >> 20) & (s->cap_decls - 1);
    for (; s->decls[j].name; j = (j + 1) & (s->cap_decls - 1)) {
      const struct decl_entry *e = &s->decls[j];
      if (e->hash == h && e->n == n && strcmp(e->name, name) == 0 && memcmp(e->dom, dom, n * sizeof(Z3_sort)) == 0)
        return e->f;
    }
  }
  Z3_func_decl f = Z3_mk_func_decl(s->z, Z3_mk_string_symbol(s->z, name), n, dom, s->real);
  if (!f || Z3_get_error_code(s->z) != Z3_OK) return NULL;
  Z3_inc_ref(s->z, Z3_func_decl_to_ast(s->z, f));
  /* Cache it; a failed allocation only skips the cache, and the caller
   * then drops the reference after use (*owned). */
  *owned = 1;
  if (2 * (s->n_decls + 1) > s->cap_decls) {
    size_t nc = s->cap_decls ? 2 * s->cap_decls : 64;
    struct decl_entry *nd = vd_calloc(nc, sizeof(*nd));
    if (!nd) return f;
    for (size_t i = 0; i < s->cap_decls; i++)
      if (s->decls[i].name) {
        size_t j = (size_t)(s->decls[i].hash * 0x9e3779b97f4a7c15ull >> 20) & (nc - 1);
        while (nd[j].name) j = (j + 1) & (nc - 1);
        nd[j] = s->decls[i];
      }
    vd_free(s->decls);
    s->decls = nd;
    s->cap_decls = nc;
  }
  char *nm = vd_strdup(name);
  Z3_sort *d = vd_malloc(sizeof(Z3_sort) * (n + 1));
  if (!nm || !d) {
    vd_free(nm);
    vd_free(d);
    return f;
  }
  memcpy(d, dom, n * sizeof(Z3_sort));
  size_t j = (size_t)(h * 0x9e3779b97f4a7c15ull >> 20) & (s->cap_decls - 1);
  while (s->decls[j].name) j = (j + 1) & (s->cap_decls - 1);
  s->decls[j] = (struct decl_entry){.hash = h, .name = nm, .n = n, .dom = d, .f = f};
  s->n_decls++;
  *owned = 0; /* the cache holds the reference */
  return f;
}

vd_term vd_smt_uf(vd_smt *s, const char *name, size_t n, const vd_term *args) {
  if (!all_live(s, n, args)) return NULL;
  /* The widest symbol is the topk gate backward: a row of logits and one of
   * gradients, 2 x VD_LIM_TOPK_EXPERTS_MAX arguments. */
  Z3_sort dom[2 * VD_LIM_TOPK_EXPERTS_MAX];
  if (n > 2 * VD_LIM_TOPK_EXPERTS_MAX)
    return vd_smt_i_fail(s, "uninterpreted function of more than 2 x TOPK_EXPERTS_MAX arguments");
  for (size_t i = 0; i < n; i++) dom[i] = Z3_get_sort(s->z, args[i]);
  int owned = 0;
  Z3_func_decl f = decl_of(s, name, (unsigned)n, dom, &owned);
  if (!f) return KEEP(NULL);
  vd_term out = KEEP(Z3_mk_app(s->z, f, (unsigned)n, (Z3_ast *)args));
  if (owned) Z3_dec_ref(s->z, Z3_func_decl_to_ast(s->z, f));
  return out;
}

/* ---- index facts ------------------------------------------------------------ */

void vd_smt_note_index_range(vd_smt *s, vd_term leaf, int64_t lo, int64_t hi) {
  if (!LIVE(leaf) || lo >= hi || !Z3_is_app(s->z, leaf)) return;
  Z3_app app = Z3_to_app(s->z, leaf);
  if (Z3_get_app_num_args(s->z, app) != 0 || Z3_get_decl_kind(s->z, Z3_get_app_decl(s->z, app)) != Z3_OP_UNINTERPRETED ||
      Z3_get_sort_kind(s->z, Z3_get_sort(s->z, leaf)) != Z3_INT_SORT)
    return; /* a numeral or a computed index: nothing to note */
  unsigned id = Z3_get_ast_id(s->z, leaf);
  for (size_t i = 0; i < s->n_facts; i++)
    if (s->facts[i].id == id) {
      /* two facts on one leaf: both hold, so their intersection does */
      if (lo > s->facts[i].lo) s->facts[i].lo = lo;
      if (hi < s->facts[i].hi) s->facts[i].hi = hi;
      return;
    }
  if (s->n_facts >= VD_LIM_INDEX_FACTS || VD_GROW(s->facts, s->cap_facts, s->n_facts + 1)) return;
  s->facts[s->n_facts++] = (vd_smt_index_fact){.leaf = leaf, .id = id, .lo = lo, .hi = hi};
}

const vd_smt_index_fact *vd_smt_index_facts(const vd_smt *s, size_t *n) {
  *n = s->n_facts;
  return s->facts;
}

void vd_smt_i_set_laws_used(vd_smt *s, int on) { s->laws_used = on; }
int vd_smt_i_laws_used(const vd_smt *s) { return s->laws_used; }
vd_term vd_smt_i_assume_facts(vd_smt *s, vd_term goal) {
  if (!LIVE(goal) || s->n_facts == 0) return goal;
  Z3_ast *c = vd_malloc(sizeof(Z3_ast) * (2 * s->n_facts + 1));
  if (!c) return vd_smt_i_fail(s, "out of memory (index facts)");
  size_t k = 0;
  for (size_t i = 0; i < s->n_facts; i++) {
    Z3_ast l = s->facts[i].leaf;
    c[k++] = KEEP(Z3_mk_le(s->z, KEEP(Z3_mk_int64(s->z, s->facts[i].lo, s->integer)), l));
    c[k++] = KEEP(Z3_mk_lt(s->z, l, KEEP(Z3_mk_int64(s->z, s->facts[i].hi, s->integer))));
  }
  c[k++] = goal;
  vd_term r = vd_smt_i_failed(s) ? NULL : KEEP(Z3_mk_and(s->z, (unsigned)k, c));
  vd_free(c);
  return r;
}

/* ---- inspection ---------------------------------------------------------- */

const char *vd_smt_to_string(vd_smt *s, vd_term t) {
  if (!t) return "(null)";
  return Z3_ast_to_string(s->z, t);
}

vd_term vd_smt_simplify(vd_smt *s, vd_term t) {
  if (!LIVE(t)) return NULL;
  return KEEP(Z3_simplify_ex(s->z, t, s->simp));
}

int vd_smt_numeral(vd_smt *s, vd_term t, double *v, char *buf, size_t n) {
  if (!t || !Z3_is_numeral_ast(s->z, t)) return 0;
  Z3_string ex = Z3_get_numeral_string(s->z, t);
  if (!ex || Z3_get_error_code(s->z) != Z3_OK) return 0;
  if (buf && n) snprintf(buf, n, "%s", ex);
  if (v) {
    Z3_string dec = Z3_get_numeral_decimal_string(s->z, t, 30);
    *v = dec ? strtod(dec, NULL) : NAN;
  }
  return 1;
}
