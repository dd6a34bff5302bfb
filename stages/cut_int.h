/*
 * stages/cut_int.h - private to the cut's files of stages/ (cut.c, cut_check.c,
 * cut_cone.c, cut_stage.c, cut_mb.c, cut_sum.c): the cut's context, its
 * cones and small map, and the functions one phase hands to the next.
 * The phases in order: cut_check.c (structural issues), cut_cone.c (the two
 * cones of a target), cut_stage.c (a stage from its cones, a slice group),
 * cut_mb.c (microbatch classes), cut_sum.c (sums by part), cut.c (the
 * driver over every final lineage, serial or forked, and the public API).
 */
#ifndef VD_STAGE_CUT_INT_H
#define VD_STAGE_CUT_INT_H

#include "stage.h"

#include <string.h>

#include "../common/hash.h"
#include "../common/limits.h"
#include "../common/mem.h"

#define NONE UINT32_MAX
#define CONE_MAX ((uint32_t)VD_LIM_CONE_MAX) /* reason: common/limits.h */
#define CONE_VALUES_MAX ((size_t)VD_LIM_CONE_VALUES_MAX)

/* ---- a small open-addressing map, reset in O(1) by generation ---------- */

typedef struct {
  uint64_t key;
  uint32_t val;
  uint32_t gen;
} hent_t;

typedef struct {
  hent_t *e;
  size_t cap, n;
  uint32_t gen;
} hmap_t;

static inline void hmap_reset(hmap_t *m) {
  m->gen++;
  m->n = 0;
}

static inline hent_t *hmap_slot(hmap_t *m, uint64_t key) {
  size_t mask = m->cap - 1;
  for (size_t i = (size_t)vd_hash_mix64(key) & mask;; i = (i + 1) & mask)
    if (m->e[i].gen != m->gen || m->e[i].key == key) return &m->e[i];
}

/* Value of key or NONE. */
static inline uint32_t hmap_get(hmap_t *m, uint64_t key) {
  if (!m->cap) return NONE;
  hent_t *s = hmap_slot(m, key);
  return s->gen == m->gen ? s->val : NONE;
}

/* Inserts key -> val (key must be absent).  -1 on ENOMEM. */
static inline int hmap_put(hmap_t *m, uint64_t key, uint32_t val) {
  if ((m->n + 1) * 2 > m->cap) {
    /* Generation 0 marks the empty slots of a fresh (zeroed) table. */
    uint32_t gen = m->gen ? m->gen : 1;
    size_t nc = m->cap ? m->cap * 2 : 64;
    hmap_t nm = {vd_calloc(nc, sizeof(hent_t)), nc, 0, gen};
    if (!nm.e) return -1;
    for (size_t i = 0; i < m->cap; i++)
      if (m->e[i].gen == m->gen) {
        hent_t *s = hmap_slot(&nm, m->e[i].key);
        *s = m->e[i];
        s->gen = gen;
        nm.n++;
      }
    vd_free(m->e);
    *m = nm;
  }
  hent_t *s = hmap_slot(m, key);
  s->key = key;
  s->val = val;
  s->gen = m->gen;
  m->n++;
  return 0;
}

static inline void hmap_free(hmap_t *m) {
  vd_free(m->e);
  memset(m, 0, sizeof(*m));
}


/* ---- context ------------------------------------------------------------ */

typedef struct {
  uint64_t key;     /* value * D + replica (single side: value) */
  int32_t piece;    /* parallel: lineage piece when it is a hypothesis leaf */
  uint8_t produced; /* some node of the stage produces it */
  uint8_t target;
  uint32_t loc;     /* stage-local index, assigned at assembly */
} cval_t;

typedef struct {
  uint32_t gnode;
  int32_t rep;
  uint8_t span;
  uint32_t pos; /* topological position of gnode */
  uint32_t loc;
} cnode_t;

typedef struct {
  cval_t *v;
  size_t n, cap;
  cnode_t *nd;
  size_t n_nd, cap_nd;
  hmap_t vmap, nmap;
} cone_t;

typedef struct {
  const vd_lin_table *lt;
  vd_stage_set *set;
  vd_diag *d;
  const vd_graph_t *gs, *gp;
  const vd_plan_t *sp, *pp;
  uint32_t D;
  int *sop, *pop;        /* registry op id per plan node, -1 if unknown */
  uint32_t *spos, *ppos; /* topological position per graph node */
  uint8_t *nolin;        /* per Gp value: "no lineage" already reported */
  size_t cap_stages;
  cone_t pc, sc;
  uint32_t *stack;
  size_t n_stack, cap_stack;
  uint32_t *mp;          /* target members of the stage being cut: piece mp[i] in replica mr[i] */
  int32_t *mr;
  size_t n_mem, cap_mem, cap_mr;
  size_t s_reached;      /* hypothesis values met by the last single walk */
  int32_t s_unrelated;   /* piece of a hypothesis the target's computation never uses, or -1 */
  /* Microbatch classes (mb_family): nm > 1 and no ALIGNMENT issue. */
  uint32_t nm;
  int mb_ok;
  uint32_t *inst;        /* Gp node of (plan node p, microbatch m) at p * nm + m, or NONE */
  uint32_t *grp;         /* per piece: first piece of its slice group */
  uint8_t *done;         /* per group (first piece): cut, or covered by another mb's stage */
  uint32_t *tp;          /* scratch: translated piece per stage value */
  size_t cap_tp;
  vd_stage_hook hook;    /* called on every finished stage, or NULL */
  void *hook_ctx;
  /* Sums by part: values whose nolin flag was set while a sum was tried
   * (cleared again when the try is rolled back). */
  uint32_t *nolin_log;
  size_t n_nolin_log, cap_nolin_log;
  int log_nolin;
  /* Parallel cut (cut_all): per issue of the set, the value whose "no
   * lineage" it reports (NONE for other issues), so that the merge keeps
   * one per value as the serial cut does. */
  uint32_t *iss_val;
  size_t cap_iss_val;
} cctx;

static inline const char *tname(const vd_plan_t *p, uint32_t t) { return vd_plan_s(p, p->tensors[t].name); }
static inline const char *nop(const vd_plan_t *p, uint32_t n) { return vd_node_op(p, &p->nodes[n]); }

static inline int is_span(const cctx *c, const vd_gnode_t *gn) {
  return gn->n_part > 0 && c->pp->nodes[gn->pnode].span_replicas && c->D > 1;
}

/* ---- phase 1 (cut_check.c) ------------------------------------------------ */
/* Appends a stage issue (its diagnosis is the kind's). */
vd_rc vd_stage_i_add_issue(cctx *c, vd_sissue_kind kind, int single, int64_t pnode, int64_t ptensor,
                           int32_t rank, int32_t mb, const char *fmt, ...) __attribute__((format(printf, 8, 9)));
/* qsort order of the set's issues. */
int vd_stage_i_issue_cmp(const void *a, const void *b);
vd_rc vd_stage_i_check_shapes(cctx *c, const vd_graph_t *g, const int *ops, int single);
vd_rc vd_stage_i_check_schedule(cctx *c);
vd_rc vd_stage_i_check_alignment(cctx *c);

/* ---- cones (cut_cone.c) ---------------------------------------------------- */
void vd_stage_i_cone_reset(cone_t *k);
void vd_stage_i_cone_free(cone_t *k);
/* "lineage 'x' pieces ..." naming the target, for issues. */
void vd_stage_i_target_label(cctx *c, const vd_lineage *L, const vd_lin_piece *p0, char *buf, size_t n);
/* The parallel cone of c's target members; *ok = 0 when it is too large. */
vd_rc vd_stage_i_parallel_cone(cctx *c, const vd_lineage *L, int *ok);
/* The single cone of svalue; *ok = 0 when it is too large. */
vd_rc vd_stage_i_single_cone(cctx *c, uint32_t svalue, int *ok);

/* ---- stages (cut_stage.c) -------------------------------------------------- */
/* Cuts the stage of lineage li's current members; *out = its index or -1. */
vd_rc vd_stage_i_cut_target(cctx *c, uint32_t li, int64_t *out);
vd_rc vd_stage_i_add_member(cctx *c, uint32_t piece, int32_t rep);
void vd_stage_i_drop_last(cctx *c);
/* The members of pieces a..b-1 in mode (see cut_stage.c). */
vd_rc vd_stage_i_group_members(cctx *c, size_t a, size_t b, int32_t mode);
void vd_stage_i_note_cut(cctx *c, int64_t sid, uint32_t li, size_t a, size_t b, int32_t mode);
/* Cuts slice group a..b-1 of lineage li. */
vd_rc vd_stage_i_cut_group(cctx *c, uint32_t li, size_t a, size_t b);

/* ---- microbatch classes (cut_mb.c) ------------------------------------------ */
uint32_t vd_stage_i_tr_value(const cctx *c, uint32_t u, int32_t m0, int32_t m);
int vd_stage_i_stage_translates(cctx *c, const vd_stage *st, int32_t m0, int32_t m);
vd_rc vd_stage_i_window_copy_r(cctx *c, const vd_stage *st, const uint32_t *tp, uint32_t tpiece, int32_t dr,
                               vd_stage *w);
vd_rc vd_stage_i_mb_family(cctx *c, size_t a, size_t b, size_t s0);

/* ---- sums by part (cut_sum.c) ----------------------------------------------- */
/* Tries slice group a..b-1 of li as a sum by part; *done = 1 when cut so. */
vd_rc vd_stage_i_cut_sum_group(cctx *c, uint32_t li, size_t a, size_t b, int *done);

#endif
