/*
 * verifier/run_reuse.c - the stages proven in an earlier round of
 * cut-and-solve, by exact content: a later round takes their verdict
 * instead of solving them again (verifier/run.c runs the rounds).
 */
#include "run_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"

/* ---- stages proven in an earlier round --------------------------------
 *
 * OPTIMIZATION-ONLY: a stage's proof obligation is a function of its nodes
 * (graph node, side, replica), its leaves (value, replica, and whether it
 * is a hypothesis) and its targets' points, given the annotations of the
 * tensors involved; dropping a candidate only removes annotations, and a
 * stage whose leaves and targets are all still points has the same
 * annotations.  So a stage of a later round with exactly the same content
 * (compared in full, not by hash) asks the same question. */

struct vd_run_sig {
  uint64_t h;
  size_t off, len;
};

vd_rc vd_run_i_stage_sig(const vd_run *r, const vd_stage *st, uint64_t **buf, size_t *cap, size_t *n) {
  size_t need = 1 + st->n_nodes + st->n_vals + st->n_targets;
  for (uint32_t k = 0; k < st->n_targets; k++) need += st->targets[k].n_pieces;
  if (need > *cap) {
    uint64_t *nb = vd_realloc_array(*buf, need, sizeof(**buf));
    if (!nb) return VD_ENOMEM;
    *buf = nb;
    *cap = need;
  }
  uint64_t *b = *buf;
  size_t i = 0;
  b[i++] = ((uint64_t)st->n_nodes << 32) | st->n_vals;
  for (uint32_t k = 0; k < st->n_nodes; k++)
    b[i++] = ((uint64_t)st->nodes[k].side << 63) | ((uint64_t)st->nodes[k].gnode << 24) | (uint32_t)st->nodes[k].replica;
  for (uint32_t k = 0; k < st->n_vals; k++)
    b[i++] = ((uint64_t)st->vals[k].side << 63) | ((uint64_t)(st->vals[k].leaf_piece >= 0) << 62) |
             ((uint64_t)st->vals[k].value << 24) | (uint32_t)st->vals[k].replica;
  for (uint32_t k = 0; k < st->n_targets; k++) {
    const vd_stage_target *tg = &st->targets[k];
    b[i++] = tg->n_pieces;
    for (uint32_t j = 0; j < tg->n_pieces; j++) {
      const vd_lin_piece *pc = &r->lt.pieces[st->idx[tg->piece_off + 2 * j]];
      b[i++] = ((uint64_t)pc->value << 24) | (uint32_t)pc->replica;
    }
  }
  *n = i;
  return VD_OK;
}

static uint64_t sig_hash(const uint64_t *b, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

int vd_run_i_sig_known(const vd_run *r, const uint64_t *b, size_t n) {
  uint64_t h = sig_hash(b, n);
  size_t lo = 0, hi = r->n_pv;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (r->pv[mid].h < h) lo = mid + 1;
    else hi = mid;
  }
  for (; lo < r->n_pv && r->pv[lo].h == h; lo++)
    if (r->pv[lo].len == n && !memcmp(r->pv_pool + r->pv[lo].off, b, n * sizeof(*b))) return 1;
  return 0;
}

/* Records the proven stages of this round (only when candidates exist:
 * without them there is no next round). */
vd_rc vd_run_i_remember_proven(vd_run *r) {
  uint64_t *b = NULL;
  size_t cap = 0, n = 0;
  vd_rc rc = VD_OK;
  for (size_t i = 0; i < r->set.n_stages && rc == VD_OK; i++) {
    if (r->verdicts[i].verdict != VD_SMT_EQUIVALENT || r->set.stages[i].compact) continue;
    if ((rc = vd_run_i_stage_sig(r, &r->set.stages[i], &b, &cap, &n)) != VD_OK) break;
    if (vd_run_i_sig_known(r, b, n)) continue;
    if (VD_GROW(r->pv_pool, r->cap_pv_pool, r->n_pv_pool + n) || VD_GROW(r->pv, r->cap_pv, r->n_pv + 1)) {
      rc = VD_ENOMEM;
      break;
    }
    memcpy(r->pv_pool + r->n_pv_pool, b, n * sizeof(*b));
    r->pv[r->n_pv++] = (struct vd_run_sig){sig_hash(b, n), r->n_pv_pool, n};
    r->n_pv_pool += n;
    /* keep sorted by hash for sig_known (insertion: rounds are few) */
    for (size_t k = r->n_pv - 1; k > 0 && r->pv[k - 1].h > r->pv[k].h; k--) {
      struct vd_run_sig t = r->pv[k];
      r->pv[k] = r->pv[k - 1];
      r->pv[k - 1] = t;
    }
  }
  vd_free(b);
  return rc;
}
