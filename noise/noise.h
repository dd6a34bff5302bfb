/*
 * noise/noise.h - rounding-error bounds of a parallel plan against its
 * single-device plan, and the comparison of a real run's values with them.
 *
 * verdict proves equivalence over the reals.  A real run computes in floating
 * point, and a parallel run rounds differently from the single-device run
 * wherever the plan computes a value another way: a contraction split into
 * partial sums (tensor, data, sequence parallelism, microbatches) and the
 * all_reduce or accumulation that adds them in another order.  This module
 * derives, for every single-device value the parallel plan holds (through
 * the lineages, annotated or inferred), a bound on the relative difference
 * ||parallel - single||_2 / ||single||_2 that rounding alone can produce:
 *
 *   - a REALISTIC bound (probabilistic: independent rounding errors of
 *     variance u^2/3 that grow as the square root of their count, the
 *     random-walk model of Higham and Mary), times lambda (opts.lambda);
 *   - a WORST-CASE bound (first-order, normwise: every rounding at its
 *     extreme, errors adding linearly; Jacobian norms estimated, see
 *     docs/noise.md for where this is not rigorous);
 *   - a BIT-IDENTICAL mark when the parallel value is computed by the very
 *     same operations on identical inputs (data movement and elementwise
 *     operators on bit-identical inputs), so any difference is a finding.
 *
 * The bounds depend on magnitudes (a k-term sum's error scales with its
 * terms).  vd_noise_run evaluates them on values: the real run's values from
 * dumps (`verdict compare`), or values of a stated scale computed by running
 * the parallel plan on random inputs (`verdict noise`).  docs/noise.md is the
 * model: the propagation rules, the assumptions (the reduction order of a
 * collective, a kernel's per-element summation order) and where the bound is
 * not sound.
 *
 * Layer: noise/ may include common/, plans/, ops/, graph/, oracle/ (not
 * used), lineage/.  tools/check_layers.sh (make lint) enforces the order.
 */
#ifndef VD_NOISE_H
#define VD_NOISE_H

#include <stddef.h>
#include <stdint.h>

#include "../common/diag.h"
#include "../lineage/lineage.h"
#include "../plans/plan.h"

/* ---- floating-point model (noise/fp.c) ------------------------------------ */

typedef enum { VD_NOISE_PLAN, VD_NOISE_BF16, VD_NOISE_FP16, VD_NOISE_FP32, VD_NOISE_FP64 } vd_noise_prec;

/* "bf16", "fp16", "fp32", "fp64" (also "bfloat16", "float16", "float32",
 * "float64"); 0 on an unknown name. */
int vd_noise_prec_parse(const char *s, vd_noise_prec *p);
const char *vd_noise_prec_name(vd_noise_prec p);
/* Unit roundoff u = 2^-p of round-to-nearest with p significand bits
 * (bf16 2^-8, fp16 2^-11, fp32 2^-24, fp64 2^-53).  A plan dtype that is not
 * a float (integers) has u = 0: its values are exact. */
double vd_noise_unit(vd_noise_prec p);
double vd_noise_unit_of_dtype(vd_dtype dt);
/* The realistic model of one rounding of a value y: the error is uniform in
 * half an ulp either side, and an ulp, averaged over a binade (|y| log-uniform),
 * is u |y| / ln 2: VD_NOISE_ULP = 1 / ln 2, and the variance of one rounding is
 * VD_NOISE_RV u^2 y^2 with VD_NOISE_RV = (1 / ln 2)^2 / 12. */
#define VD_NOISE_ULP 1.4426950408889634
#define VD_NOISE_RV 0.17344824582650045
/* a GEMM extent (rows or columns) below which the CPU kernels take small-matrix code paths whose
 * summation order differs (measured below 12 on PyTorch 2.9.1; noise/prop.c) */
#define VD_NOISE_GEMM_PATH 16
/* gamma_k = k u / (1 - k u) (Higham), +inf when k u >= 1. */
double vd_noise_gamma(double k, double u);

/* ---- dumps (noise/dump.c) ----------------------------------------------------
 *
 * A dump holds real values of one run, keyed by the plan's tensor ids:
 *
 *   verdict-dump 1 single|parallel
 *   v TENSOR_ID REPLICA first|last N x1 ... xN
 *
 * (docs/noise.md, tools/torchcap/dump.py writes it).  Memory is bounded by
 * the file: a record's N must match its line. */

typedef struct vd_noise_dump vd_noise_dump;

/* Reads path.  VD_EINPUT with one line naming the file, the line and the
 * field; VD_ENOMEM.  *out is owned by the caller (vd_noise_dump_free). */
vd_rc vd_noise_dump_read(const char *path, vd_noise_dump **out, vd_diag *d);
void vd_noise_dump_free(vd_noise_dump *dump); /* accepts NULL */
/* "single" or "parallel", as the header says. */
const char *vd_noise_dump_kind(const vd_noise_dump *dump);
/* Values of (id, replica) before the step (last = 0) or after it (last = 1),
 * or NULL; *n gets the count. */
const double *vd_noise_dump_get(const vd_noise_dump *dump, int64_t id, int32_t replica, int last, int64_t *n);

/* ---- the analysis (noise/run.c, noise/prop.c, noise/map.c) ------------------ */

typedef struct {
  vd_noise_prec dtype;  /* precision of every floating value; PLAN: each tensor's plan dtype */
  vd_noise_prec accum;  /* accumulation precision of sums and contractions; PLAN: dtype */
  double scale;         /* noise mode: random inputs uniform in [-scale, scale] (<= 0: 1) */
  double lambda;        /* realistic bound = lambda x the model's standard deviation (<= 0: 3) */
  uint64_t seed;        /* noise mode inputs and the probes' directions */
  const char *sm, *pm;  /* file names for messages */
} vd_noise_opts;

typedef enum {
  VD_NOISE_BOUND,   /* noise mode: a bound, nothing observed */
  VD_NOISE_WITHIN,  /* observed <= realistic bound (exactly 0 when bit-identical) */
  VD_NOISE_BEYOND,  /* observed above the bound */
  VD_NOISE_MISSING, /* one side has values and the other has none */
  VD_NOISE_NOBOUND  /* values present, but an input of the computation has none: no bound */
} vd_noise_status;

extern const char *const vd_noise_status_names[5];

typedef struct {
  uint32_t svalue;      /* single graph value */
  uint32_t stensor;     /* single plan tensor index */
  int64_t id;           /* its plan id */
  uint8_t initial;      /* the value before the step (a boundary input) */
  uint8_t bitid;        /* must be bit-identical */
  vd_noise_status status;
  char name[160];       /* tensor name, or the producing node's name and operator */
  char family[24];      /* input, weight, fwd, bwd, opt, loss (the plot's series) */
  double norm;          /* ||single||_2 */
  double realistic, worst; /* relative bounds */
  double observed;      /* relative deviation (compare), -1 when not observed */
  double abs_observed;  /* ||parallel - single||_2 */
  uint32_t n_pieces;
  char why[160];        /* MISSING / NOBOUND: what is absent */
} vd_noise_row;

typedef struct {
  vd_noise_row *rows; size_t n_rows;   /* in the single graph's topological order */
  size_t n_count[5];                   /* rows per status */
  size_t n_bitid;
  int64_t first_beyond;                /* row index, -1 if none */
  int64_t first_missing;
  size_t n_unrecorded;                 /* single values with a lineage and no value on either side */
  size_t n_parallel_values, n_evaluated; /* parallel values (all replicas); of them computed here */
  /* Lineage inference: where it stopped (the node the verifier's hint names). */
  vd_lin_infer_stats infer;
  char stuck[512];                     /* "" or the stuck node's description */
  /* The first point of departure (docs/noise.md, "Reading a compare report"): when the first
   * tensor beyond rounding reads values that have no single-device counterpart (no lineage), the
   * earliest parallel node on that un-mapped path, to which the deviation is attributed.  -1 and
   * "" when the first beyond tensor is itself the departure (every input it reads is mapped). */
  int64_t departure_node;              /* parallel plan node index, or -1 */
  int departure_is_stuck;              /* it is the node lineage inference stopped at */
  char departure[512];                 /* "" or its description */
  int compared;                        /* 1: compare mode */
} vd_noise_result;

/* Analyses a validated pair (sp single, pp parallel; pp gets the inferred
 * lineages written into it).  sd/pd: the dumps of a real run (compare mode)
 * or both NULL (noise mode: random inputs of opts->scale).  VD_OK with *r
 * filled; VD_EINPUT when the plans cannot be analysed (a broken graph, a
 * dump that does not fit the plan: wrong length) with one line in d;
 * VD_ENOMEM.  Free *r with vd_noise_result_free in every case. */
vd_rc vd_noise_run(const vd_plan_t *sp, vd_plan_t *pp, const vd_noise_dump *sd, const vd_noise_dump *pd,
                   const vd_noise_opts *o, vd_noise_result *r, vd_diag *d);
void vd_noise_result_free(vd_noise_result *r);

#endif
