/*
 * solver/smt_cert.c - a proof obligation as a standalone SMT-LIB2 script
 * (the certificates of `verdict --certificate`, docs/verifier.md section 10),
 * and Z3's answer on such a script (`verdict recheck --solver z3`).
 *
 * Why a printer of our own rather than Z3's (Z3_benchmark_to_smtlib_string):
 * the text must be standard SMT-LIB 2.6 that cvc5 reads, whatever the names
 * of the plans' tensors are, and deterministic: Z3's printer nests `let`s
 * as deep as the term (a 2,000-deep accumulation chain) and names shared
 * subterms after its internal ids.  Here every compound subterm is one
 * zero-argument define-fun (`vd!tK`, K in post-order from the first pair's
 * parallel side), so the text is linear in the term DAG, never nested more
 * than one operator deep, and the same bytes for the same terms.
 *
 * The script, in order:
 *   ; header comment lines (the caller's)
 *   (set-logic ALL)
 *   declarations: every free symbol (declare-fun NAME () Real|Int) and every
 *     uninterpreted kernel (declare-fun NAME (Real ..) Real), sorted by name;
 *   definitions: (define-fun vd!tK () SORT (OP ARGS..)) for every subterm;
 *   ; goal
 *   (assert (or (not (= P0 S0)) (not (= P1 S1)) ..))
 *   (check-sat)
 * The definitions are the hypotheses (the lineage of the parallel leaves is
 * substituted into them; see SOUNDNESS in stage_solve.c, encode_stage),
 * with the stage's index facts (a checked label's range, smt.h) and, when
 * the proof used them, the laws of the real exp and log as quantified
 * axioms (smt_poly_laws.c);
 * removing everything from the `; goal` line on and asking (check-sat)
 * must give sat, or the obligation is vacuous (recheck asks).  The script
 * is unsat exactly when every pair is equal for all values of the free
 * symbols (under the facts) and all interpretations of the kernels (that
 * obey the stated laws): what vd_smt_check proves when it says equivalent.
 *
 * Names: a symbol's name is written as a quoted symbol |..|; characters an
 * SMT-LIB quoted symbol cannot hold ('|', '\', control bytes, non-ASCII)
 * become '_', and so do '!' (reserved for our suffixes, the kernels'
 * prefix k! and the definitions' names vd!tK) and a leading '@' or '.'
 * (reserved in SMT-LIB even when quoted); a kernel is |k!name| (the
 * logic may define a function of its name: cvc5's exp); names that then coincide (or one name declared
 * with two signatures: a kernel applied at two arities) get a suffix "!vdN",
 * so two distinct symbols are never printed as one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <z3.h>

#include "../common/mem.h"
#include "smt.h"
#include "smt_idmap.h"

/* ---- declarations ---------------------------------------------------------- */

typedef struct {
  Z3_func_decl f;
  char *raw;    /* Z3's name */
  char *sig;    /* "(Real Int) Real": the signature as printed */
  char *shown;  /* the printed symbol, quoted */
} decl;

typedef struct {
  decl *v;
  size_t n, cap;
} declvec;

static const char *sort_name(Z3_context z, Z3_sort so) {
  switch (Z3_get_sort_kind(z, so)) {
  case Z3_REAL_SORT: return "Real";
  case Z3_INT_SORT: return "Int";
  case Z3_BOOL_SORT: return "Bool";
  default: return NULL;
  }
}

static int decl_cmp(const void *a, const void *b) {
  const decl *x = a, *y = b;
  int c = strcmp(x->raw, y->raw);
  return c ? c : strcmp(x->sig, y->sig);
}

static int shown_cmp(const void *a, const void *b) {
  const decl *const *x = a, *const *y = b;
  int c = strcmp((*x)->shown, (*y)->shown);
  return c ? c : decl_cmp(*x, *y);
}

/* |name| with the characters a quoted symbol cannot hold replaced; a
 * kernel (a function of arity > 0) is |k!name|: a solver's logic may define
 * a function of the same name (cvc5's ALL has exp, sin, cos, ...), which a
 * declaration must not shadow, and no constant's name starts so ('!' is
 * replaced in every raw name). */
static char *quote_name(const char *raw, unsigned suffix, int kernel) {
  size_t n = strlen(raw);
  char *q = vd_malloc(n + 32);
  if (!q) return NULL;
  size_t o = 0;
  q[o++] = '|';
  if (kernel) {
    q[o++] = 'k';
    q[o++] = '!';
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)raw[i];
    /* a leading '@' or '.' is reserved in SMT-LIB even inside |..| (cvc5
     * refuses the torch capture's "@v11"), so it becomes '_' too */
    int reserved = i == 0 && !kernel && (ch == '@' || ch == '.');
    q[o++] = (reserved || ch < 0x20 || ch >= 0x7f || ch == '|' || ch == '\\' || ch == '!') ? '_' : (char)ch;
  }
  if (suffix) o += (size_t)snprintf(q + o, 24, "!vd%u", suffix);
  q[o++] = '|';
  q[o] = 0;
  return q;
}

/* ---- the walk ----------------------------------------------------------------- */

typedef struct {
  vd_smt *s;
  Z3_context z;
  vd_smt_idmap slot;      /* ast id -> definition index (>= 0), or -1 - decl index for a symbol, or INT64_MIN for a numeral */
  vd_smt_idmap declidx;   /* func decl ast id -> index into decls */
  declvec decls;
  FILE *defs;      /* the definitions, written while walking */
  int64_t n_defs;
  vd_diag *d;
} walk;

static vd_rc add_decl(walk *w, Z3_func_decl f, int64_t *idx) {
  Z3_context z = w->z;
  unsigned fid = Z3_get_ast_id(z, Z3_func_decl_to_ast(z, f));
  int64_t *have = vd_smt_i_idmap_get(&w->declidx, fid);
  if (have) {
    *idx = *have;
    return VD_OK;
  }
  Z3_symbol sym = Z3_get_decl_name(z, f);
  char numbuf[32];
  const char *raw = Z3_get_symbol_kind(z, sym) == Z3_STRING_SYMBOL
                        ? Z3_get_symbol_string(z, sym)
                        : (snprintf(numbuf, sizeof(numbuf), "k!%d", Z3_get_symbol_int(z, sym)), numbuf);
  unsigned ar = Z3_get_arity(z, f);
  char sig[1024];
  size_t o = (size_t)snprintf(sig, sizeof(sig), "(");
  for (unsigned i = 0; i < ar && o < sizeof(sig); i++) {
    const char *sn = sort_name(z, Z3_get_domain(z, f, i));
    if (!sn) VD_FAIL(w->d, VD_EINTERNAL, NULL, "certificate", raw, "argument %u of this kernel has no SMT-LIB2 sort", i);
    o += (size_t)snprintf(sig + o, sizeof(sig) - o, "%s%s", i ? " " : "", sn);
  }
  const char *rn = sort_name(z, Z3_get_range(z, f));
  if (!rn) VD_FAIL(w->d, VD_EINTERNAL, NULL, "certificate", raw, "this symbol has no SMT-LIB2 sort");
  if (o < sizeof(sig)) snprintf(sig + o, sizeof(sig) - o, ") %s", rn);
  if (o >= sizeof(sig) - 16) VD_FAIL(w->d, VD_EINTERNAL, NULL, "certificate", raw, "signature too long");
  if (w->decls.n == w->decls.cap && VD_GROW(w->decls.v, w->decls.cap, w->decls.n + 1) != 0) return VD_OOM(w->d);
  decl *e = &w->decls.v[w->decls.n];
  memset(e, 0, sizeof(*e));
  e->f = f;
  e->raw = vd_strdup(raw);
  e->sig = vd_strdup(sig);
  if (!e->raw || !e->sig) {
    vd_free(e->raw);
    vd_free(e->sig);
    return VD_OOM(w->d);
  }
  *idx = (int64_t)w->decls.n++;
  if (vd_smt_i_idmap_put(&w->declidx, fid, *idx)) return VD_OOM(w->d);
  return VD_OK;
}

/* The SMT-LIB2 operator of an interpreted application, NULL if it has none
 * we write (the encoders use only these). */
static const char *op_text(Z3_decl_kind k) {
  switch (k) {
  case Z3_OP_ADD: return "+";
  case Z3_OP_SUB: return "-";
  case Z3_OP_MUL: return "*";
  case Z3_OP_DIV: return "/";
  case Z3_OP_IDIV: return "div";
  case Z3_OP_MOD: return "mod";
  case Z3_OP_UMINUS: return "-";
  case Z3_OP_TO_REAL: return "to_real";
  case Z3_OP_TO_INT: return "to_int";
  case Z3_OP_EQ: return "=";
  case Z3_OP_DISTINCT: return "distinct";
  case Z3_OP_LE: return "<=";
  case Z3_OP_GE: return ">=";
  case Z3_OP_LT: return "<";
  case Z3_OP_GT: return ">";
  case Z3_OP_ITE: return "ite";
  case Z3_OP_AND: return "and";
  case Z3_OP_OR: return "or";
  case Z3_OP_NOT: return "not";
  case Z3_OP_IMPLIES: return "=>";
  default: return NULL;
  }
}

/* A numeral in SMT-LIB2: Real "p/q" -> (/ p.0 q.0), negatives as (- ..). */
static void put_numeral(FILE *f, const char *num, int is_int) {
  int neg = num[0] == '-';
  const char *p = num + neg;
  const char *slash = strchr(p, '/');
  if (neg) fputs("(- ", f);
  if (is_int) fputs(p, f);
  else if (slash) fprintf(f, "(/ %.*s.0 %s.0)", (int)(slash - p), p, slash + 1);
  else if (strchr(p, '.')) fputs(p, f);
  else fprintf(f, "%s.0", p);
  if (neg) fputs(")", f);
}

/* Writes the reference to an already-visited term t. */
static vd_rc put_ref(walk *w, FILE *f, Z3_ast t) {
  Z3_context z = w->z;
  if (Z3_is_numeral_ast(z, t)) {
    const char *num = Z3_get_numeral_string(z, t);
    if (!num) VD_FAIL(w->d, VD_EINTERNAL, NULL, "certificate", "numeral", "Z3 gives no text");
    put_numeral(f, num, Z3_get_sort_kind(z, Z3_get_sort(z, t)) == Z3_INT_SORT);
    return VD_OK;
  }
  int64_t *v = vd_smt_i_idmap_get(&w->slot, Z3_get_ast_id(z, t));
  if (!v) VD_FAIL(w->d, VD_EINTERNAL, NULL, "certificate", "term", "referenced before it is defined");
  if (*v >= 0) fprintf(f, "vd!t%lld", (long long)*v);
  else if (*v == INT64_MIN + 1) fputs("true", f);
  else if (*v == INT64_MIN + 2) fputs("false", f);
  else {
    /* a symbol: printed after the names are chosen, so a placeholder that
     * the final pass replaces: "\x01<decl index>\x02" */
    fprintf(f, "\x01%lld\x02", (long long)(-1 - *v));
  }
  return VD_OK;
}

typedef struct {
  Z3_ast t;
  unsigned next; /* next argument to visit */
} frame;

/* Post-order over the DAG under root: every compound subterm gets its
 * definition once. */
static vd_rc visit(walk *w, Z3_ast root) {
  Z3_context z = w->z;
  frame *stack = NULL;
  size_t n = 0, cap = 0;
  vd_rc rc = VD_OK;
  if (vd_smt_i_idmap_get(&w->slot, Z3_get_ast_id(z, root)) || Z3_is_numeral_ast(z, root)) return VD_OK;
  if (VD_GROW(stack, cap, 64) != 0) return VD_OOM(w->d);
  stack[n++] = (frame){root, 0};
  while (n && rc == VD_OK) {
    frame *fr = &stack[n - 1];
    Z3_ast t = fr->t;
    if (Z3_get_ast_kind(z, t) != Z3_APP_AST) {
      rc = VD_ERR(w->d, VD_EINTERNAL, NULL, "certificate", "term", "not an application (quantifier or variable)");
      break;
    }
    Z3_app a = Z3_to_app(z, t);
    unsigned na = Z3_get_app_num_args(z, a);
    if (fr->next < na) {
      Z3_ast c = Z3_get_app_arg(z, a, fr->next++);
      if (!Z3_is_numeral_ast(z, c) && !vd_smt_i_idmap_get(&w->slot, Z3_get_ast_id(z, c))) {
        if (n == cap && VD_GROW(stack, cap, n + 1) != 0) {
          rc = VD_OOM(w->d);
          break;
        }
        stack[n++] = (frame){c, 0};
      }
      continue;
    }
    /* every argument is visited: define t */
    n--;
    Z3_func_decl f = Z3_get_app_decl(z, a);
    Z3_decl_kind k = Z3_get_decl_kind(z, f);
    unsigned id = Z3_get_ast_id(z, t);
    if (k == Z3_OP_TRUE || k == Z3_OP_FALSE) {
      if (vd_smt_i_idmap_put(&w->slot, id, k == Z3_OP_TRUE ? INT64_MIN + 1 : INT64_MIN + 2)) rc = VD_OOM(w->d);
      continue;
    }
    if (k == Z3_OP_UNINTERPRETED && na == 0) {
      int64_t di;
      if ((rc = add_decl(w, f, &di)) != VD_OK) break;
      if (vd_smt_i_idmap_put(&w->slot, id, -1 - di)) rc = VD_OOM(w->d);
      continue;
    }
    const char *sn = sort_name(z, Z3_get_sort(z, t));
    if (!sn) {
      rc = VD_ERR(w->d, VD_EINTERNAL, NULL, "certificate", "term", "a subterm has no SMT-LIB2 sort");
      break;
    }
    fprintf(w->defs, "(define-fun vd!t%lld () %s (", (long long)w->n_defs, sn);
    if (k == Z3_OP_UNINTERPRETED) {
      int64_t di;
      if ((rc = add_decl(w, f, &di)) != VD_OK) break;
      fprintf(w->defs, "\x01%lld\x02", (long long)di);
    } else {
      const char *op = op_text(k);
      if (!op) {
        Z3_symbol sym = Z3_get_decl_name(z, f);
        rc = VD_ERR(w->d, VD_EINTERNAL, NULL, "certificate", "term", "Z3 operator '%s' has no SMT-LIB2 form here",
                    Z3_get_symbol_kind(z, sym) == Z3_STRING_SYMBOL ? Z3_get_symbol_string(z, sym) : "?");
        break;
      }
      fputs(op, w->defs);
    }
    for (unsigned i = 0; i < na && rc == VD_OK; i++) {
      fputc(' ', w->defs);
      rc = put_ref(w, w->defs, Z3_get_app_arg(z, a, i));
    }
    fputs("))\n", w->defs);
    if (rc == VD_OK && vd_smt_i_idmap_put(&w->slot, id, w->n_defs++)) rc = VD_OOM(w->d);
  }
  vd_free(stack);
  return rc;
}

/* Copies text to f, replacing the placeholders "\x01<decl>\x02" by the
 * chosen names. */
static void emit_resolved(FILE *f, const char *text, size_t len, const declvec *dv) {
  size_t i = 0;
  while (i < len) {
    const char *p = memchr(text + i, '\x01', len - i);
    if (!p) {
      fwrite(text + i, 1, len - i, f);
      break;
    }
    fwrite(text + i, 1, (size_t)(p - (text + i)), f);
    char *end = NULL;
    long long di = strtoll(p + 1, &end, 10);
    fputs(di >= 0 && (size_t)di < dv->n ? dv->v[di].shown : "|?|", f);
    i = (size_t)(end - text) + 1; /* past \x02 */
  }
}

/* The goal's disjunct of one open pair, (not (= par single)), after its
 * terms are defined in w->defs. */
static vd_rc write_disjunct(walk *w, FILE *goal, vd_term a, vd_term b, size_t open_pairs) {
  fputs(open_pairs ? "\n  " : "", goal);
  /* An index tensor may be Int on one side and Real on the other: compared
   * as reals, as the check compares them (smt_check.c, solve). */
  Z3_sort_kind ka = Z3_get_sort_kind(w->z, Z3_get_sort(w->z, a));
  Z3_sort_kind kb = Z3_get_sort_kind(w->z, Z3_get_sort(w->z, b));
  int ra = ka == Z3_INT_SORT && kb == Z3_REAL_SORT, rb = kb == Z3_INT_SORT && ka == Z3_REAL_SORT;
  fputs("(not (= ", goal);
  if (ra) fputs("(to_real ", goal);
  VD_CHECK(put_ref(w, goal, a));
  fputs(ra ? ") " : " ", goal);
  if (rb) fputs("(to_real ", goal);
  VD_CHECK(put_ref(w, goal, b));
  fputs(rb ? ")))" : "))", goal);
  return VD_OK;
}

/* Defines every pair's terms (w->defs) and writes the goal's disjuncts;
 * *open_pairs: the pairs that are not the same term. */
static vd_rc write_goal(walk *w, const vd_term *par, const vd_term *single, size_t n, FILE *goal, size_t *open_pairs) {
  vd_rc rc = VD_OK;
  for (size_t i = 0; i < n && rc == VD_OK; i++) {
    if (!par[i] || !single[i]) return VD_ERR(w->d, VD_EINTERNAL, NULL, "certificate", NULL, "pair %zu has no term", i);
    if (par[i] == single[i]) continue; /* the same term: equal, nothing to prove */
    if ((rc = visit(w, par[i])) == VD_OK) rc = visit(w, single[i]);
    if (rc != VD_OK) break;
    if ((rc = write_disjunct(w, goal, par[i], single[i], *open_pairs)) != VD_OK) break;
    (*open_pairs)++;
  }
  return rc;
}

/* The index facts of the stage (smt.h): hypotheses as the check's goal
 * assumes them. */
static vd_rc write_facts(walk *w, FILE *h) {
  size_t n;
  const vd_smt_index_fact *f = vd_smt_index_facts(w->s, &n);
  if (n) fputs("; index facts: labels that the program checks (nll_loss, gather) lie in their range\n", h);
  for (size_t i = 0; i < n; i++) {
    VD_CHECK(visit(w, f[i].leaf));
    fprintf(h, "(assert (and (<= %lld ", (long long)f[i].lo);
    VD_CHECK(put_ref(w, h, f[i].leaf));
    fputs(") (< ", h);
    VD_CHECK(put_ref(w, h, f[i].leaf));
    fprintf(h, " %lld)))\n", (long long)f[i].hi);
  }
  return VD_OK;
}

/* The declaration of the one-argument kernel `name` among the walk's, or NULL. */
static const decl *kernel_decl(const walk *w, const char *name) {
  for (size_t i = 0; i < w->decls.n; i++)
    if (strcmp(w->decls.v[i].raw, name) == 0 && Z3_get_arity(w->z, w->decls.v[i].f) == 1) return &w->decls.v[i];
  return NULL;
}

/* When the normal form's proof used the laws of exp and log
 * (smt_poly_laws.c), they are hypotheses too: the obligation is then
 * unsat for the real exp and log, not for every interpretation of the
 * symbols (written after name_decls: it prints the kernels' names). */
static void write_laws(const walk *w, FILE *h) {
  const decl *e = kernel_decl(w, "exp"), *l = kernel_decl(w, "log");
  if (!vd_smt_i_laws_used(w->s) || !e) return;
  fputs("; the laws of the real exp and log that the proof used (solver/smt_poly_laws.c)\n", h);
  fprintf(h, "(assert (forall ((x Real)) (> (%s x) 0.0)))\n", e->shown);
  fprintf(h, "(assert (forall ((x Real) (y Real)) (= (%s (+ x y)) (* (%s x) (%s y)))))\n", e->shown, e->shown, e->shown);
  if (!l) return;
  fprintf(h, "(assert (forall ((x Real)) (= (%s (%s x)) x)))\n", l->shown, e->shown);
  fprintf(h, "(assert (forall ((x Real)) (=> (> x 0.0) (= (%s (%s x)) x))))\n", e->shown, l->shown);
}

/* Names: every declaration quoted; those whose quoted names coincide
 * (sorted by name, then signature, so the choice is deterministic) get
 * "!vd2", "!vd3", ... in that order.  The vector keeps the walk's order
 * (the placeholders index it); order[0..decls.n) gets the printing order. */
static vd_rc name_decls(walk *w, decl **order) {
  for (size_t i = 0; i < w->decls.n; i++) {
    if (!(w->decls.v[i].shown = quote_name(w->decls.v[i].raw, 0, Z3_get_arity(w->z, w->decls.v[i].f) > 0)))
      return VD_OOM(w->d);
    order[i] = &w->decls.v[i];
  }
  qsort(order, w->decls.n, sizeof(*order), shown_cmp);
  for (size_t i = 1, run = 1; i < w->decls.n; i++) {
    /* order[i - 1] may be suffixed already: compare the base names */
    char *base_prev = quote_name(order[i - 1]->raw, 0, Z3_get_arity(w->z, order[i - 1]->f) > 0);
    if (!base_prev) return VD_OOM(w->d);
    int same = strcmp(base_prev, order[i]->shown) == 0;
    vd_free(base_prev);
    run = same ? run + 1 : 1;
    if (!same) continue;
    char *q = quote_name(order[i]->raw, (unsigned)run, Z3_get_arity(w->z, order[i]->f) > 0);
    if (!q) return VD_OOM(w->d);
    vd_free(order[i]->shown);
    order[i]->shown = q;
  }
  return VD_OK;
}

/* The script: the header as comments, the declarations, the definitions
 * (dbuf), the stage's facts and laws (hbuf) and the goal (gbuf, a
 * disjunction of open_pairs disjuncts). */
static void write_script(FILE *out, const char *header, const walk *w, decl *const *order, const char *dbuf,
                         size_t dlen, const char *hbuf, size_t hlen, const char *gbuf, size_t glen,
                         size_t open_pairs) {
  if (header && *header) {
    const char *p = header;
    while (*p) {
      const char *e = strchr(p, '\n');
      size_t l = e ? (size_t)(e - p) : strlen(p);
      fprintf(out, "; %.*s\n", (int)l, p);
      p += l + (e ? 1 : 0);
    }
  }
  fputs("(set-logic ALL)\n", out);
  for (size_t i = 0; i < w->decls.n; i++) fprintf(out, "(declare-fun %s %s)\n", order[i]->shown, order[i]->sig);
  fputs("; hypotheses: the definitions below (the parallel leaves' lineage is substituted into them)\n", out);
  emit_resolved(out, dbuf, dlen, &w->decls);
  emit_resolved(out, hbuf, hlen, &w->decls);
  fputs("; goal\n", out);
  if (open_pairs == 0) fputs("(assert false)\n", out);
  else if (open_pairs == 1) {
    fputs("(assert ", out);
    emit_resolved(out, gbuf, glen, &w->decls);
    fputs(")\n", out);
  } else {
    fputs("(assert (or\n  ", out);
    emit_resolved(out, gbuf, glen, &w->decls);
    fputs("))\n", out);
  }
  fputs("(check-sat)\n(exit)\n", out);
}

vd_rc vd_smt_write_obligation(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, const char *header,
                              FILE *out, vd_smt_cert_stats *stats, vd_diag *d) {
  walk w = {.s = s, .z = vd_smt_i_z3(s), .slot = {.first_cap = 1024}, .declidx = {.first_cap = 1024}, .d = d};
  char *dbuf = NULL, *gbuf = NULL, *hbuf = NULL;
  size_t dlen = 0, glen = 0, hlen = 0;
  FILE *goal = NULL, *hyp = NULL;
  decl **order = NULL;
  vd_rc rc = vd_smt_status(s, d, "certificate");
  if (rc != VD_OK) return rc;
  memset(stats, 0, sizeof(*stats));
  w.defs = open_memstream(&dbuf, &dlen);
  goal = open_memstream(&gbuf, &glen);
  hyp = open_memstream(&hbuf, &hlen);
  if (!w.defs || !goal || !hyp) {
    rc = VD_OOM(d);
    goto done;
  }
  size_t open_pairs = 0;
  if ((rc = write_goal(&w, par, single, n, goal, &open_pairs)) != VD_OK) goto done;
  if ((rc = write_facts(&w, hyp)) != VD_OK) goto done;
  order = vd_calloc(w.decls.n + 1, sizeof(*order));
  if (!order) {
    rc = VD_OOM(d);
    goto done;
  }
  if ((rc = name_decls(&w, order)) != VD_OK) goto done;
  write_laws(&w, hyp);
  if (fflush(w.defs) || fflush(goal) || fflush(hyp)) {
    rc = VD_OOM(d);
    goto done;
  }
  write_script(out, header, &w, order, dbuf, dlen, hbuf, hlen, gbuf, glen, open_pairs);
  stats->n_pairs = open_pairs;
  stats->n_defs = (size_t)w.n_defs;
  stats->n_decls = w.decls.n;
  if (ferror(out)) rc = VD_ERR(d, VD_EIO, NULL, "certificate", NULL, "write failed");
done:
  if (w.defs) fclose(w.defs);
  if (goal) fclose(goal);
  if (hyp) fclose(hyp);
  free(dbuf); /* open_memstream's buffers come from malloc */
  free(gbuf);
  free(hbuf);
  for (size_t i = 0; i < w.decls.n; i++) {
    vd_free(w.decls.v[i].raw);
    vd_free(w.decls.v[i].sig);
    vd_free(w.decls.v[i].shown);
  }
  vd_free(w.decls.v);
  vd_free(order);
  vd_smt_i_idmap_free(&w.slot);
  vd_smt_i_idmap_free(&w.declidx);
  return rc;
}

/* ---- Z3 on a script (recheck --solver z3) ------------------------------------- */

vd_rc vd_smt_run_script(const char *text, unsigned timeout_ms, char *answer, size_t n, vd_diag *d) {
  Z3_config cfg = Z3_mk_config();
  if (!cfg) return VD_OOM(d);
  char tbuf[32];
  if (timeout_ms) {
    snprintf(tbuf, sizeof(tbuf), "%u", timeout_ms);
    Z3_set_param_value(cfg, "timeout", tbuf);
  }
  Z3_context z = Z3_mk_context(cfg);
  Z3_del_config(cfg);
  if (!z) return VD_OOM(d);
  Z3_set_error_handler(z, NULL);
  const char *r = Z3_eval_smtlib2_string(z, text);
  vd_rc rc = VD_OK;
  if (Z3_get_error_code(z) != Z3_OK || !r) {
    const char *msg = Z3_get_error_msg(z, Z3_get_error_code(z));
    snprintf(answer, n, "error: %s", msg ? msg : "?");
  } else {
    /* the last non-empty line: check-sat's answer */
    size_t l = strlen(r);
    while (l && (r[l - 1] == '\n' || r[l - 1] == '\r' || r[l - 1] == ' ')) l--;
    size_t b = l;
    while (b && r[b - 1] != '\n') b--;
    snprintf(answer, n, "%.*s", (int)(l - b), r + b);
  }
  Z3_del_context(z);
  return rc;
}
