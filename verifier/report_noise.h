/*
 * verifier/report_noise.h - what `verdict noise` and `verdict compare` share:
 * loading the pair and writing a vd_noise_result as text, JSON and HTML
 * (docs/noise.md, "Reports").
 */
#ifndef VD_REPORT_NOISE_H
#define VD_REPORT_NOISE_H

#include <stdio.h>

#include "../noise/noise.h"

typedef struct {
  const char *mode;          /* "noise" or "compare" */
  const vd_noise_opts *o;
  const char *plan_verdict;  /* "EQUIVALENT", "NOT EQUIVALENT", "INCONCLUSIVE", or NULL (not verified) */
  const char *single_dump, *parallel_dump;
  int verbose;               /* text: every row, not only the findings */
} vd_noise_report_ctx;

/* Reads and checks both plans (operators, kinds, that they belong together).
 * Returns -1 on success, else the exit code after printing the error. */
int vd_noise_load_pair(const char *sm, const char *pm, vd_plan_t *sp, vd_plan_t *pp);

void vd_noise_write_text(FILE *f, const vd_noise_result *r, const vd_noise_report_ctx *x);
/* Write to path ("-": stdout); 0 on success, else prints the error and returns 2. */
int vd_noise_write_json(const char *path, const vd_noise_result *r, const vd_noise_report_ctx *x);
int vd_noise_write_html(const char *path, const vd_noise_result *r, const vd_noise_report_ctx *x);

#endif
