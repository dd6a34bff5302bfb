/*
 * noise/prop_int.h - private to the propagation of the error bounds
 * (prop.c, prop_probe.c, prop_node.c): the buffers of one node's
 * evaluation and bounds, the state its steps share, and the functions each
 * file gives the others (each described where it is defined).
 */
#ifndef VD_NOISE_PROP_INT_H
#define VD_NOISE_PROP_INT_H

#include <stdint.h>

#include "noise_int.h"

/* The operator call of one node's evaluation (vd_noise_i_eval_node). */
/* A contraction's output against its single tensor: the same shape; another shape, each element
 * summed in the same order (vd_noise_i_contraction_keeps_order); another shape and another order. */
enum { SAME_SHAPE = 0, SAME_ORDER = 1, REORDERED = 2 };

typedef struct {
  const double **in;
  double **out;
  vd_op_shape *is, *os;
  uint32_t cap;
} callbuf;

/* The work buffers of one node's bounds, grown as needed (prop_probe.c). */
typedef struct {
  double *tmpd;            /* perturbed input */
  double *tmpc;            /* 5 per output: contraction terms */
  double **wvec, **wtmp, **s1v; /* per output: worst-case bound vector, a probe's, sum |terms| */
  double **base;           /* per output: the node evaluated in double on its inputs (the probes' origin) */
  double **rvar;           /* per output: realistic variance per element */
  double **kv, **s2v;      /* per output: terms per element, sum of squared terms (contractions) */
  double **blk;            /* per output: the block wtmp, s1v, base, kv, s2v point into */
  double **absd;           /* per input: |x| */
  int64_t *abscap;
  double **tmpo;           /* outputs of a probe */
  const double **ins;
  uint32_t cap;
  int64_t tcap;
  int64_t *ocap;
} workbuf;

/* What the steps of one node's bounds share (vd_noise_i_node_bounds). */
typedef struct {
  vd_noise_ctx *c;
  uint32_t k;
  callbuf *b;
  workbuf *w;
  vd_diag *d;
  const vd_gnode_t *gn;
  const vd_node_t *pn;
  int op;
  const uint32_t *iv, *ov;
  int bit_in, any_wc;   /* every input bit-identical; some input has a worst-case vector */
  int64_t in_parts, out_parts, maxn;
  int coll_sum;         /* a sum all_reduce / reduce_scatter over several participants */
  int combine;          /* adds parts the single plan never sums separately */
  int quant;            /* the quantised-difference rule applies (kv holds q) */
  int low;              /* bfloat16/float16 kernels: shape-dependent code paths */
  double u, ua;         /* unit roundoff of the outputs, of the accumulation */
  double *nfac, *km, *reblock; /* per output (w->tmpc): split factor, largest K, SAME_SHAPE/... */
} nodestep;

/* prop.c: tensors, units of rounding, the operator classes, evaluation. */
const vd_tensor_t *vd_noise_i_ptensor(const vd_noise_ctx *c, uint32_t v);
int vd_noise_i_is_float(vd_dtype dt);
double vd_noise_i_unit_of(const vd_noise_ctx *c, const vd_tensor_t *t);
double vd_noise_i_accum_unit(const vd_noise_ctx *c, double u_out);
int64_t vd_noise_i_part_n(const vd_tensor_t *t);
int vd_noise_i_is_move(int op);
int vd_noise_i_is_elementwise(int op);
int vd_noise_i_is_contraction(int op);
int vd_noise_i_kernel_dependent(int op);
int vd_noise_i_is_sum_of_inputs(int op);
int vd_noise_i_whole_single(const vd_noise_ctx *c, uint32_t v);
int vd_noise_i_contraction_keeps_order(const vd_noise_ctx *c, int op, uint32_t v, const uint32_t *iv,
                                   uint32_t n_in);
vd_rc vd_noise_i_eval_node(vd_noise_ctx *c, uint32_t k, callbuf *b, const double *const *in, double *const *out,
                       vd_diag *d);

/* prop_probe.c: work buffers, probes, contraction terms. */
vd_rc vd_noise_i_work_fit(workbuf *w, uint32_t n, vd_diag *d);
vd_rc vd_noise_i_buf_at_least(double **p, int64_t *cap, int64_t n, vd_diag *d);
void vd_noise_i_work_free(workbuf *w);
vd_rc vd_noise_i_probe_outputs(vd_noise_ctx *c, uint32_t k, workbuf *w, vd_diag *d);
vd_rc vd_noise_i_probe(vd_noise_ctx *c, uint32_t k, uint32_t i, callbuf *b, workbuf *w, vd_diag *d);
vd_rc vd_noise_i_probe_realistic(const nodestep *s, uint32_t i);
vd_rc vd_noise_i_probe_worst(const nodestep *s, uint32_t i);
vd_rc vd_noise_i_contraction_terms(vd_noise_ctx *c, uint32_t k, int op, callbuf *b, double *kmax, double *s1n,
                               double *vsum, double u_acc, const double *nfac, double **s1v, double **kv,
                               double **s2v, vd_diag *d);

/* prop_node.c: one node's bounds. */
vd_rc vd_noise_i_node_bounds(vd_noise_ctx *c, uint32_t k, callbuf *b, workbuf *w, vd_diag *d);

#endif
