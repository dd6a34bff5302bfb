/*
 * plans/io_int.h - private to the plan reader and writer of plans/ (io.c,
 * io_scan.c, io_fields.c, io_records.c, io_write.c): the reader's limits
 * and context, the error macros, and what one pass hands to the next.
 */
#ifndef VD_PLAN_IO_INT_H
#define VD_PLAN_IO_INT_H

#include "plan.h"

#include <msgpack.h>

#include "../common/limits.h"
#include "idmap.h"

#define MAX_FILE_BYTES ((uint64_t)4 << 30) /* 4 GiB */
#define MAX_DEPTH 24                         /* msgpack-c's own stack is 32 */
/* Memory bounded by the file size (common/limits.h says why): inputs or
 * outputs of one node, and node executions per byte of file.  The schedule
 * is what lets a small file ask for a huge graph: one step listed 10^6
 * times costs 3 MB and multiplies every node of its segment by 10^6
 * (validate.c refuses repeated steps as well). */
#define MAX_NODE_REFS VD_LIM_NODE_REFS_MAX
#define MAX_EXEC_PER_BYTE VD_LIM_EXEC_PER_BYTE
#define MAX_EXEC_SLACK ((uint64_t)VD_LIM_EXEC_SLACK)

/* Big-endian unsigned of n bytes. */
static inline uint64_t vd_plan_i_be(const uint8_t *b, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = (v << 8) | b[i];
  return v;
}

/* ---- pass 1 (io_scan.c) ---------------------------------------------------- */
/* top_pos (out, taken even on failure; NULL when the top object is not a
 * map): the byte offset of each key and value of the top-level map, in file
 * order, then len: 2 * pairs + 1 entries. */
vd_rc vd_plan_i_scan(const uint8_t *b, size_t len, const char *file, size_t **top_pos, vd_diag *d);

/* ---- pass 3: the reader's context and field readers (io_fields.c) ----------- */
typedef struct {
  const char *file;
  vd_diag *d;
  vd_plan_t *p;
  /* Record name, formatted only when an error is reported (rec_of): an
   * snprintf per record and per field was a third of the read time. */
  char rec[128];
  const char *rec_kind; /* "tensor"/"node": "<kind> <id> '<name>'"; NULL: rec is literal */
  const char *rec_arr;  /* when the id is unknown: "<arr>[<pos>]" */
  uint32_t rec_pos;
  int has_id;
  int64_t rec_id;
  const char *rec_name;
  uint32_t rec_name_len;
  char *sbuf[4]; /* scratch strings: 0 op/name/model, 1 node name, 2 node src, 3 node stack */
  size_t scap[4];
  int64_t *ints;
  size_t cap_ints;
  uint32_t *refs[2];
  size_t cap_refs[2];
  /* Tensor file id -> index.  OPTIMIZATION-ONLY: while the ids read so far
   * are consecutive (base, base + 1, ...: what every generator and the
   * nnScaler converter write), the index is id - base and tmap stays empty;
   * the first other id moves the ids read so far into tmap.  Consecutive ids
   * are distinct, so duplicates are found exactly as before. */
  vd_idmap_t tmap;
  int ids_dense;
  int64_t id_base;
  /* Record arrays decoded one element at a time (see read_top): the top
   * map's entries, and per entry the byte offset of the next element of a
   * "tensors" or "nodes" array left undecoded (0: decoded as usual). */
  const char *buf;
  size_t len;
  const msgpack_object_kv *top_kv;
  size_t *lazy_at;
  uint32_t n_top;
  msgpack_zone *ez; /* the current element's objects, cleared per element */
  msgpack_object eobj;
} rctx;

typedef const msgpack_object mobj;

/* The current record's name, formatted on first use. */
const char *vd_plan_i_rec_of(rctx *c);
#define RFAIL(c, field, ...) VD_FAIL((c)->d, VD_EINPUT, (c)->file, vd_plan_i_rec_of(c), (field), __VA_ARGS__)
#define ROOM(c) VD_FAIL((c)->d, VD_ENOMEM, (c)->file, vd_plan_i_rec_of(c), NULL, "out of memory")

/* The msgpack type name of o, for messages. */
const char *vd_plan_i_tname(mobj *o);
int vd_plan_i_str_is(mobj *o, const char *s);
void vd_plan_i_set_rec_text(rctx *c, const char *text);
vd_rc vd_plan_i_get_int(rctx *c, mobj *o, const char *field, int64_t *v);
vd_rc vd_plan_i_get_i32(rctx *c, mobj *o, const char *field, int32_t *v);
/* A string copied NUL-terminated into scratch slot `slot`. */
vd_rc vd_plan_i_get_cstr(rctx *c, mobj *o, const char *field, int slot, const char **out);
/* An array of at most VD_PLAN_STACK_MAX one-line strings, copied into scratch
 * slot `slot` joined by '\n' (the node's `stack`). */
vd_rc vd_plan_i_get_lines(rctx *c, mobj *o, const char *field, int slot, const char **out);
vd_rc vd_plan_i_get_enum(rctx *c, mobj *o, const char *field, const char *const *names, int count, int *v);
vd_rc vd_plan_i_get_bool(rctx *c, mobj *o, const char *field, int *v);
vd_rc vd_plan_i_get_array(rctx *c, mobj *o, const char *field, uint32_t *n);
/* An int array into c->ints. */
vd_rc vd_plan_i_get_ints(rctx *c, mobj *o, const char *field, uint32_t *n);
vd_rc vd_plan_i_get_dims(rctx *c, mobj *o, const char *field, int want, int64_t *dst);
/* The entries of map o by key into slots (unknown keys refused). */
vd_rc vd_plan_i_get_fields(rctx *c, mobj *o, const char *field, const char *const *keys, int nk, mobj **slots,
                           const char *prefix);
/* A required field present. */
vd_rc vd_plan_i_need(rctx *c, mobj *slot, const char *field);
/* Element i of array a (decoded now when the array is read lazily). */
vd_rc vd_plan_i_elem(rctx *c, mobj *a, uint32_t i, mobj **out);
/* Names the record at array position pos before it is read. */
void vd_plan_i_peek_rec(rctx *c, mobj *o, const char *kind, const char *arr, uint32_t pos);

/* ---- pass 3: records (io_records.c) ----------------------------------------- */
vd_rc vd_plan_i_read_world(rctx *c, mobj *o, vd_world_t *w, const char **layout);
vd_rc vd_plan_i_read_tensor(rctx *c, mobj *o, uint32_t pos);
vd_rc vd_plan_i_read_node(rctx *c, mobj *o, uint32_t pos);

#endif
