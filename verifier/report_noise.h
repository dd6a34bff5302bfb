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

/* The two plans of a noise or compare run, and its result. */
typedef struct {
  vd_plan_t sp, pp;
  vd_noise_result r;
} vd_noise_pair;

/* Zeroes np, then reads and checks both plans (operators, kinds, that they
 * belong together).  Returns -1 on success, else the exit code after
 * printing the error; np is to be freed with vd_noise_pair_free either way. */
int vd_noise_pair_load(vd_noise_pair *np, const char *sm, const char *pm);
void vd_noise_pair_free(vd_noise_pair *np);

/* The value v of option a of `verdict <mode>`: a precision (--dtype, --accum;
 * not "plan") or a positive number below 1e30 (--scale, --lambda).  Returns
 * -1 with *p or *x set, else prints the error and returns the exit code. */
int vd_noise_arg_prec(const char *mode, const char *a, const char *v, vd_noise_prec *p);
int vd_noise_arg_positive(const char *mode, const char *a, const char *v, double *x);

void vd_noise_write_text(FILE *f, const vd_noise_result *r, const vd_noise_report_ctx *x);
/* Write to path ("-": stdout); 0 on success, else prints the error and returns 2. */
int vd_noise_write_json(const char *path, const vd_noise_result *r, const vd_noise_report_ctx *x);
int vd_noise_write_html(const char *path, const vd_noise_result *r, const vd_noise_report_ctx *x);
/* The JSON and HTML files asked for (either path may be NULL): code, or 2
 * when one could not be written. */
int vd_noise_write_files(const char *json, const char *html, const vd_noise_result *r,
                         const vd_noise_report_ctx *x, int code);

#endif
