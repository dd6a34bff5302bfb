/*
 * verifier/report_int.h - private to the run reports (report.c, the human
 * report; report_json.c, the JSON report and --dump-stages): the facts
 * both print about one lineage piece.
 */
#ifndef VD_REPORT_INT_H
#define VD_REPORT_INT_H

#include <stdint.h>

#include "run.h"

/* What the reports say about one piece of a lineage: its parallel tensor
 * (name, file id), global rank, microbatch, replica, part and slice.  The
 * pointers are borrowed from the run. */
typedef struct {
  const char *tensor;
  int64_t id;     /* parallel tensor file id */
  int64_t rank;   /* global */
  int32_t mb, replica;
  int64_t part_k, part_n;
  const int64_t *lo, *hi;
  int ndim;
} piece_info;

/* Fills *pi for piece `piece` of r's lineage table. */
void vd_report_i_piece_facts(const vd_run *r, int32_t piece, piece_info *pi);

#endif
