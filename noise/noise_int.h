/*
 * noise/noise_int.h - what the files of noise/ share: the analysis context.
 *
 * run.c builds the graphs and the lineage table, prop.c (with prop_probe.c,
 * prop_node.c; prop_int.h) computes a value for
 * every parallel graph value (from the dump, or by evaluating its node) and
 * propagates the error bounds through the parallel graph, map.c maps them
 * onto the single-device values through the lineage pieces.
 */
#ifndef VD_NOISE_INT_H
#define VD_NOISE_INT_H

#include "../graph/graph.h"
#include "../ops/ops.h"
#include "noise.h"

typedef struct {
  const vd_plan_t *sp;
  vd_plan_t *pp;
  const vd_noise_dump *sd, *pd;
  const vd_noise_opts *o;
  vd_graph_t gs, gp0, gpx; /* single; parallel replica 0 (lineages); parallel, every replica (values) */
  vd_lin_table lt;
  uint8_t *inferred;
  /* Per gpx value. */
  double **val;       /* its values, or NULL (no value: an input of its node had none) */
  uint8_t *own;       /* val[v] allocated here (else borrowed from the dump) */
  uint8_t *dumped;    /* val[v] comes from the parallel dump */
  uint8_t *bitid;     /* computed by the very same operations as the single value */
  double *ere, *ewc;  /* absolute error bounds: realistic (2-norm, one standard deviation), worst (max-norm) */
  double **ewv;       /* worst case, componentwise (|error_e| <= ewv[v][e]); NULL: all zero */
  double **erv;       /* realistic: standard deviation per element; NULL: all zero */
  double *nrm;        /* ||value||_2 */
  uint8_t *known;     /* ere/ewc/bitid are set (an initial value, or its node's inputs had bounds) */
  size_t n_evaluated;
} vd_noise_ctx;

/* prop.c: values and bounds of every gpx value, in gpx topological order. */
vd_rc vd_noise_i_propagate(vd_noise_ctx *c, vd_diag *d);
/* map.c: the rows of r from the lineage table. */
vd_rc vd_noise_i_map(vd_noise_ctx *c, vd_noise_result *r, vd_diag *d);
/* The dump record of graph value v of plan p in graph g (NULL if none); *n its length. */
const double *vd_noise_i_dumped(const vd_noise_dump *dump, const vd_graph_t *g, uint32_t v, int64_t *n);

#endif
