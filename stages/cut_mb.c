/*
 * stages/cut_mb.c - microbatch classes by construction: a slice group of one
 * microbatch is cut once, for its class, when its stages are the stages of
 * the same group in the other microbatches (translated node for node).
 */
#include "cut_int.h"

#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/ctl.h"
#include "../common/limits.h"
#include "../common/hash.h"
#include "../common/mem.h"
#include "../ops/ops.h"

/* ---- microbatch classes by construction ------------------------------------
 *
 * A slice group whose pieces all belong to microbatch m0 is cut for m0 only
 * when its stages are literally the stages of the same group in microbatch
 * m (docs/verifier.md section 2, "Microbatch classes").  The translation
 * tau_m maps a Gp node of microbatch m0 to the instance of the same plan node
 * in microbatch m, a per-microbatch value to the value of the same tensor,
 * version and output slot in microbatch m, and a persistent value to itself.
 * A stage stands for microbatch m when tau_m maps every parallel node to a
 * node with exactly the translated operands, every leaf to a leaf that is a
 * point with the same lineage, part and replica structure, every produced
 * non-target value to a value that is no point, and the target group onto a
 * whole slice group of microbatch m that is not cut yet; and when its
 * windowed slices do not move (checked at one m, which suffices because the
 * slices are affine in m; see window_same). */

/* Instance of Gp node g (microbatch m0) in microbatch m, or NONE. */
static uint32_t tr_node(const cctx *c, uint32_t g, int32_t m0, int32_t m) {
  const vd_gnode_t *gn = &c->gp->nodes[g];
  if (gn->mb != m0 || gn->pnode >= c->pp->n_nodes) return NONE;
  uint32_t t = c->inst[(size_t)gn->pnode * c->nm + (uint32_t)m];
  if (t == NONE) return NONE;
  const vd_gnode_t *tn = &c->gp->nodes[t];
  if (tn->pnode != gn->pnode || tn->mb != m || tn->replica != gn->replica || tn->n_in != gn->n_in ||
      tn->n_out != gn->n_out || tn->n_part != gn->n_part)
    return NONE;
  return t;
}

/* tau_m of Gp value u, or NONE. */
uint32_t vd_stage_i_tr_value(const cctx *c, uint32_t u, int32_t m0, int32_t m) {
  const vd_graph_t *g = c->gp;
  const vd_value_t *x = &g->values[u];
  if (x->mb < 0) return u;
  if (x->mb != m0) return NONE;
  if (x->producer < 0) {
    int32_t f = vd_graph_first(g, x->tensor, x->replica, m);
    if (f < 0 || g->values[f].producer >= 0 || g->values[f].version != x->version) return NONE;
    return (uint32_t)f;
  }
  uint32_t t = tr_node(c, (uint32_t)x->producer, m0, m);
  if (t == NONE) return NONE;
  const vd_gnode_t *gn = &g->nodes[x->producer];
  const uint32_t *ov = vd_gnode_outputs(g, gn), *tv = vd_gnode_outputs(g, &g->nodes[t]);
  for (uint32_t o = 0; o < gn->n_out; o++)
    if (ov[o] == u) {
      const vd_value_t *y = &g->values[tv[o]];
      return y->tensor == x->tensor && y->version == x->version && y->mb == m ? tv[o] : NONE;
    }
  return NONE;
}

/* Whether two pieces make the same claim up to their slice (same lineage,
 * part, part count and replica structure). */
static int piece_like(const vd_lin_table *lt, uint32_t a, uint32_t b) {
  const vd_lin_piece *p = &lt->pieces[a], *q = &lt->pieces[b];
  return p->lineage == q->lineage && p->part_k == q->part_k && p->part_n == q->part_n && p->f == q->f &&
         p->all_rep == q->all_rep &&
         p->replica == q->replica && p->initial == q->initial;
}

/* Whether stage st translates to microbatch m (structure only); fills
 * c->tp[value] with the translated piece of every hypothesis leaf. */
int vd_stage_i_stage_translates(cctx *c, const vd_stage *st, int32_t m0, int32_t m) {
  const vd_lin_table *lt = c->lt;
  const vd_graph_t *g = c->gp;
  for (uint32_t k = 0; k < st->n_nodes; k++) {
    const vd_stage_node *sn = &st->nodes[k];
    if (!sn->side) continue;
    uint32_t t = tr_node(c, sn->gnode, m0, m);
    if (t == NONE) return 0;
    const vd_gnode_t *gn = &g->nodes[sn->gnode], *tn = &g->nodes[t];
    const uint32_t *iv = vd_gnode_inputs(g, gn), *tiv = vd_gnode_inputs(g, tn);
    const uint32_t *ov = vd_gnode_outputs(g, gn), *tov = vd_gnode_outputs(g, tn);
    for (uint32_t i = 0; i < gn->n_in; i++)
      if (vd_stage_i_tr_value(c, iv[i], m0, m) != tiv[i]) return 0;
    for (uint32_t o = 0; o < gn->n_out; o++)
      if (vd_stage_i_tr_value(c, ov[o], m0, m) != tov[o]) return 0;
  }
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *v = &st->vals[i];
    c->tp[i] = NONE;
    if (!v->side) continue;
    uint32_t tu = vd_stage_i_tr_value(c, v->value, m0, m);
    if (tu == NONE) return 0;
    int32_t pc = vd_lin_piece_of(lt, tu, v->replica);
    if (v->producer >= 0) {
      /* a produced value: a point only if it is a target (checked by the
       * caller through the group), never a hypothesis in microbatch m */
      if (pc >= 0 && vd_lin_piece_of(lt, v->value, v->replica) < 0) return 0;
      continue;
    }
    if (v->leaf_piece < 0 || pc < 0 || !piece_like(lt, (uint32_t)v->leaf_piece, (uint32_t)pc)) return 0;
    c->tp[i] = (uint32_t)pc;
  }
  return 1;
}

/* Copies the values and targets of st with unwindowed shapes and the slices
 * of its hypotheses and target taken from pieces tp (NONE: the stage's own
 * piece) and target piece tpiece, then windows the copy. */
vd_rc vd_stage_i_window_copy_r(cctx *c, const vd_stage *st, const uint32_t *tp, uint32_t tpiece, int32_t dr,
                           vd_stage *w);
static vd_rc window_copy(cctx *c, const vd_stage *st, const uint32_t *tp, uint32_t tpiece, vd_stage *w) {
  return vd_stage_i_window_copy_r(c, st, tp, tpiece, 0, w);
}

/* The same with every hypothesis taken in replica (its replica + dr). */
vd_rc vd_stage_i_window_copy_r(cctx *c, const vd_stage *st, const uint32_t *tp, uint32_t tpiece, int32_t dr,
                           vd_stage *w) {
  const vd_lin_table *lt = c->lt;
  *w = *st;
  w->vals = vd_malloc((st->n_vals ? st->n_vals : 1) * sizeof(*w->vals));
  w->targets = vd_malloc(sizeof(*w->targets));
  if (!w->vals || !w->targets) return VD_OOM(c->d);
  memcpy(w->vals, st->vals, st->n_vals * sizeof(*w->vals));
  w->targets[0] = st->targets[0];
  w->n_targets = 1;
  for (uint32_t i = 0; i < st->n_vals; i++) {
    vd_stage_value *v = &w->vals[i];
    if (!v->side) {
      memcpy(v->shape, c->sp->tensors[c->gs->values[v->value].tensor].shape, sizeof(v->shape));
      memcpy(v->rshape, v->shape, sizeof(v->rshape));
      memset(v->woff, 0, sizeof(v->woff));
      continue;
    }
    if (v->producer >= 0 || v->leaf_piece < 0) continue;
    vd_lin_piece_at(lt, tp && tp[i] != NONE ? tp[i] : (uint32_t)v->leaf_piece, v->replica + dr, v->plo, v->phi);
  }
  vd_stage_target *tg = &w->targets[0];
  const vd_stage_value *tv = &st->vals[st->idx[tg->piece_off + 1]];
  vd_lin_piece_at(lt, tpiece, tv->replica, tg->blo, tg->bhi);
  tg->has_bslice = 1;
  return vd_stage_window(lt, w, c->d);
}

/* Whether the windowed slices and shapes of st are the same with the
 * translated pieces (c->tp, target piece tpiece) as with its own.  Slices are
 * affine in the microbatch (lo + m * mb_shift per tensor), and a window is
 * the hull of a class's slices: equality at one m != m0 means every slice of
 * a window class moves by one common amount and slices of pinned classes do
 * not move, hence equality at every m (as for replicas, replica_uniform). */
static vd_rc window_same(cctx *c, const vd_stage *st, uint32_t tpiece, int *same) {
  vd_stage a = {0}, b = {0};
  vd_rc rc;
  *same = 0;
  if ((rc = window_copy(c, st, NULL, st->idx[st->targets[0].piece_off], &a)) == VD_OK &&
      (rc = window_copy(c, st, c->tp, tpiece, &b)) == VD_OK) {
    int eq = !memcmp(a.targets[0].blo, b.targets[0].blo, sizeof(a.targets[0].blo)) &&
             !memcmp(a.targets[0].bhi, b.targets[0].bhi, sizeof(a.targets[0].bhi));
    for (uint32_t i = 0; i < st->n_vals && eq; i++) {
      const vd_stage_value *x = &a.vals[i], *y = &b.vals[i];
      eq = !memcmp(x->shape, y->shape, sizeof(x->shape)) && !memcmp(x->plo, y->plo, sizeof(x->plo)) &&
           !memcmp(x->phi, y->phi, sizeof(x->phi));
    }
    *same = eq;
  }
  vd_free(a.vals);
  vd_free(a.targets);
  vd_free(b.vals);
  vd_free(b.targets);
  return rc;
}

/* Translates the slice group [a, b) (microbatch m0) to microbatch m: the
 * first piece of the translated group, or NONE when the translation is not
 * a whole slice group of microbatch m that is still to be cut. */
static uint32_t tr_group(cctx *c, size_t a, size_t b, int32_t m0, int32_t m) {
  const vd_lin_table *lt = c->lt;
  uint32_t g0 = NONE;
  for (size_t i = a; i < b; i++) {
    const vd_lin_piece *p = &lt->pieces[i];
    uint32_t tv = vd_stage_i_tr_value(c, p->value, m0, m);
    if (tv == NONE) return NONE;
    int32_t q = vd_lin_piece_of(lt, tv, p->replica);
    if (q < 0 || !piece_like(lt, (uint32_t)i, (uint32_t)q) || lt->pieces[q].mb != m ||
        lt->pieces[q].lineage != p->lineage)
      return NONE;
    if (g0 == NONE) g0 = c->grp[q];
    if (c->grp[q] != g0) return NONE;
  }
  size_t n = 0;
  for (size_t j = g0; j < lt->n_pieces && c->grp[j] == g0; j++) n++;
  return n == b - a && !c->done[g0] ? g0 : NONE;
}

/* After cutting the stages [s0, n_stages) of slice group [a, b): the other
 * microbatches' groups these stages stand for are marked done, and the
 * stages count them (n_mb).  Only what really differs (a microbatch whose
 * program, wiring or lineage differs, the accumulation that reads several
 * microbatches) is left to be cut on its own. */
vd_rc vd_stage_i_mb_family(cctx *c, size_t a, size_t b, size_t s0) {
  const vd_lin_table *lt = c->lt;
  vd_stage_set *set = c->set;
  int32_t m0 = lt->pieces[a].mb;
  if (!c->mb_ok || m0 < 0 || s0 >= set->n_stages) return VD_OK;
  for (size_t i = a; i < b; i++)
    if (lt->pieces[i].mb != m0) return VD_OK;
  int windows_checked = 0;
  uint32_t covered = 0;
  int32_t *list = vd_malloc((c->nm + 1) * sizeof(*list));
  if (!list) return VD_OOM(c->d);
  list[0] = m0;
  for (int32_t m = 0; m < (int32_t)c->nm; m++) {
    if (m == m0) continue;
    uint32_t g = tr_group(c, a, b, m0, m);
    if (g == NONE) continue;
    int ok = 1;
    for (size_t s = s0; s < set->n_stages && ok; s++) {
      const vd_stage *st = &set->stages[s];
      if (VD_GROW(c->tp, c->cap_tp, st->n_vals + 1)) {
        vd_free(list);
        return VD_OOM(c->d);
      }
      ok = vd_stage_i_stage_translates(c, st, m0, m);
      if (ok && !windows_checked) {
        const vd_lin_piece *p = &lt->pieces[st->idx[st->targets[0].piece_off]];
        int32_t q = vd_lin_piece_of(lt, vd_stage_i_tr_value(c, p->value, m0, m), p->replica);
        vd_rc rc = window_same(c, st, (uint32_t)q, &ok);
        if (rc != VD_OK || !ok) { /* !ok: the slices move inside a window, at every m */
          vd_free(list);
          return rc;
        }
      }
    }
    if (!ok) continue;
    windows_checked = 1;
    c->done[g] = 1;
    list[++covered] = m;
  }
  for (size_t s = s0; s < set->n_stages && covered; s++) {
    vd_stage *st = &set->stages[s];
    st->n_mb = 1 + covered;
    st->mb_list = vd_malloc((size_t)st->n_mb * sizeof(*st->mb_list));
    if (!st->mb_list) {
      vd_free(list);
      return VD_OOM(c->d);
    }
    memcpy(st->mb_list, list, (size_t)st->n_mb * sizeof(*list));
  }
  vd_free(list);
  return VD_OK;
}
