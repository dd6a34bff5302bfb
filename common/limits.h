/*
 * common/limits.h - every numeric limit and default of verdict, in one
 * table, each with the reason for its value.
 *
 * A limit is used by the module that owns the mechanism (the cone walk of
 * stages/cut.c, the coverage grid of lineage/lineage.c, the solver's
 * defaults, ...), but its value is written only here, so that two modules
 * cannot disagree about a default (the stage timeout was 10 s in the solver
 * and 20 s on the command line) and a reader finds the reason next to the
 * number.  `verdict limits` prints the table (verifier/cmd_limits.c).
 *
 * VD_LIMITS(X) expands X(ID, value, option, reason) once per limit:
 *   ID      the constant is VD_LIM_<ID>; its row is vd_limits[VD_LIMI_<ID>];
 *   value   an integer constant expression (fits in an int);
 *   option  the command-line option that overrides it, or NULL;
 *   reason  why this value: what it bounds and what happens beyond it.
 * Soundness: no limit decides a verdict.  Going beyond one yields
 * INCONCLUSIVE (exit 3) naming the limit, a slower exact path, or, for a
 * bound on what a file may ask for (read time), bad input (exit 2).
 */
#ifndef VD_LIMITS_H
#define VD_LIMITS_H

#include <stddef.h>

#define VD_LIMITS(X)                                                                                     \
  X(STAGE_TIMEOUT_MS, 30000, "--stage-timeout",                                                         \
    "wall-clock backstop per solver check, in ms.  The deterministic STAGE_BUDGET decides first; this " \
    "only bounds Z3 code paths that do not charge its resource limit.  At the limit Z3 is interrupted "  \
    "and, if it does not return within a grace period, abandoned on its own thread.  INCONCLUSIVE, "    \
    "never a verdict; 0 is refused on the command line ('none' = no limit).")                            \
  X(STAGE_BUDGET, 5000000, "--stage-budget",                                                             \
    "deterministic work per solver check: steps of the polynomial normal form (solver/smt_poly.c) and " \
    "Z3 resource units (rlimit).  The same stage stops at the same point on any machine and load.  "   \
    "The hardest correct MoE stage needs about 10^5 steps; 5 * 10^6 is about 1 s of normal form here.  " \
    "On the command line in millions (--stage-budget 5).")                                              \
  X(SIMP_MAX_STEPS, 5000000, NULL,                                                                       \
    "rewrite steps of Z3's simplifier normal form (the job's fast path, smt_check.c): a deterministic " \
    "bound; past it the simplification fails and the pairs stay open for the solver.")                 \
  X(EVAL_MAX_STEPS, 10000000, NULL,                                                                      \
    "rewrite steps of one Z3 model evaluation (the witness's and the counterexample's values, "        \
    "smt_check.c; Z3's model_evaluator.max_steps, set once per process).  Z3's evaluator does not "     \
    "charge its resource limit, so this is the deterministic bound on that path; past it the witness " \
    "finds nothing, or a difference already proved is reported without its values.")                  \
  X(MAX_FAILURES, 10, "--max-failures",                                                                  \
    "failing stages reported in detail (0 = all).  Each is re-solved serially for a deterministic "     \
    "counterexample, so a plan with thousands of failing stages would otherwise re-solve them all.")    \
  X(SEED, 1, "--seed",                                                                                   \
    "seed of the solver's random witness (smt_check.c) and of `verdict exec`'s inputs.  Fixed by "      \
    "default so that output is byte-identical from run to run.")                                        \
  X(STAGE_MAX_ELEMS, 16384, NULL,                                                                        \
    "elements of the largest value of a stage the solver will encode; a larger stage is INCONCLUSIVE.  " \
    "Reduced stages hold a few hundred elements at most; one beyond this was not reduced, and its "     \
    "terms would take minutes and gigabytes.")                                                           \
  X(CEX_ELEMS, 4, NULL,                                                                                  \
    "disagreeing elements kept per failing stage's counterexample: enough to show which copies "       \
    "disagree and by what factor, few enough that a report with many failures stays readable.")         \
  X(SOM_BLOWUP, 10, NULL,                                                                                \
    "Z3 simplifier som_blowup of the fast path: how far expanding a product into a sum of monomials " \
    "may grow it.  Z3's own default, written down so that a Z3 upgrade cannot change the normal form; " \
    "a product left unexpanded only sends its stage to the solver (OPTIMIZATION-ONLY).")               \
  X(CONE_MAX, 100000, NULL,                                                                              \
    "graph nodes of one stage cone.  A cone this large means the lineage annotations cut nothing (the " \
    "whole model is one proof obligation, which no stage timeout accommodates); the target is not "     \
    "solved and the run is INCONCLUSIVE (exit 3) naming the target, never NOT EQUIVALENT.")             \
  X(CONE_VALUES_MAX, 400000, NULL,                                                                        \
    "values of one stage cone (about 500 bytes each in the stage).  Nodes with many operands, or a "      \
    "stage holding every replica's instance, pass it before CONE_MAX: one concat of 200 inputs in each "  \
    "of 30,000 replicas made a stage of 6 * 10^6 values (3.9 GB for a 16 KB plan).  INCONCLUSIVE, as "     \
    "CONE_MAX.")                                                                                         \
  X(TOPK_EXPERTS_MAX, 256, NULL,                                                                         \
    "experts of one topk_gate row in a stage: the symbol takes the whole row as arguments (twice for " \
    "the backward) and the encoder and the witness evaluator hold a row on the stack.  More experts "   \
    "after shape reduction is bad input for the encoder: the stage is INCONCLUSIVE.")                   \
  X(LIN_GRID_MAX, 1 << 22, NULL,                                                                         \
    "cells of the coordinate-compressed grid of one lineage coverage check (one byte each: 4 MB).  "   \
    "Beyond it a sorted sweep counts volume instead, which reports a partial overlap as OVERLAP.")     \
  X(LIN_PART_MAX, 1 << 20, NULL,                                                                         \
    "parts n of one lineage partial sum (`part: [k, n]`).  A sum has one part per rank and microbatch "   \
    "that contributes to it (a 405B data-parallel gradient: 64).  A larger n is bad input (exit 2) at "   \
    "read time; below it the checks that use n run in O(listed parts), never O(n).")                    \
  X(GRAPH_MAX_ISSUES, 65536, NULL,                                                                       \
    "graph issues stored per plan (about 420 bytes each: 27 MB); the rest are counted and the count "  \
    "is reported.  A broken plan repeats one mistake per rank and microbatch.")                        \
  X(LIN_MAX_ISSUES, 4096, NULL,                                                                          \
    "lineage issues stored; the rest are counted and the count is reported.  Lineage issues repeat "  \
    "per replica, and the first few name the wrong annotation.")                                        \
  X(NODE_REFS_MAX, 65535, NULL,                                                                          \
    "inputs, or outputs, of one plan node (the registry's variadic bound).  A longer list is bad "     \
    "input (exit 2) before the graph and the stages multiply it: 10^7 inputs on one node took 1.8 GB.") \
  X(EXEC_PER_BYTE, 4, NULL,                                                                              \
    "node executions (a node runs once per step of its segment) per byte of plan file, plus "         \
    "EXEC_SLACK.  A generated Llama-3 plan with 16 microbatches runs 0.06 per byte; a schedule that "  \
    "asks for more is bad input, so verify memory (about 150 bytes per execution) follows the file.") \
  X(EXEC_SLACK, 1 << 20, NULL,                                                                           \
    "node executions allowed to any plan on top of EXEC_PER_BYTE per byte (small files).")             \
  X(REPLICA_EXEC_PER_BYTE, 64, NULL,                                                                     \
    "node executions and annotated tensor instances in all replicas (replicas x one replica's) per "    \
    "byte of the parallel plan, plus REPLICA_EXEC_SLACK.  `replicas` costs a few bytes, but the lineage " \
    "table and `verdict exec` work per replica.  The Llama-3 405B shape: 6.7 per byte.  Beyond the "     \
    "bound verify and exec stop at once, INCONCLUSIVE (exit 3): the plan is valid, verdict declines the " \
    "work (a 13 KB plan at dp 10^6 ran past 300 s and 2 GB).")                                          \
  X(REPLICA_EXEC_SLACK, 1 << 18, NULL,                                                                   \
    "node executions and annotated instances in all replicas allowed to any plan on top of "             \
    "REPLICA_EXEC_PER_BYTE per byte (a tiny file at the bound: about 400 MB and 4 s of verify).")               \
  X(CUT_VALUES_PER_VALUE, 64, NULL,                                                                      \
    "stage values cut in one round (operand references count 1/16) per value of the two graphs, plus "   \
    "one per node execution in all "                                                                     \
    "replicas (sums by part hold every replica's piece: 0.3 per execution), plus CUT_VALUES_SLACK.  A "   \
    "stage copies each node it holds with all its outputs; generated plans cut 2 to 13 per value.  A "    \
    "node with 1000 outputs read by 1000 targets cut 10^6 (2.3 GB for a 49 KB plan).  Past the bound "   \
    "the cut stops and the run is INCONCLUSIVE (exit 3), in seconds.")                                  \
  X(CUT_VALUES_SLACK, 1 << 18, NULL,                                                                     \
    "stage values any plan may cut on top of CUT_VALUES_PER_VALUE (about 500 bytes each).")              \
  X(INDEX_FACTS, 4096, NULL,                                                                             \
    "index leaves of one stage whose range is known (labels of a loss that checks its targets).  Past "  \
    "it a label's range is not used: the normal form proves less and the solver may find "              \
    "out-of-range counterexamples, which stay INCONCLUSIVE (solver/stage_solve.c).")                    \
  X(INDEX_SPAN, 256, NULL,                                                                              \
    "values of a known index range that the normal form writes out as indicators (a label in [0, V) "   \
    "after shape reduction).  A wider range is not written out: OPTIMIZATION-ONLY (fewer proofs).")     \
  X(Z3_MEMORY_MB, 6144, NULL,                                                                            \
    "Z3's memory ceiling (memory_max_size, all contexts of the process), lowered to two thirds of "    \
    "the address space left under ulimit -v.  Past it Z3 reports out of memory and the run ends in "   \
    "exit 3 (solver/smt.c); VERDICT_Z3_MEMORY_MB overrides it for tests.")

/* The values, as constants. */
enum {
#define VD_LIM_VALUE(ID, value, option, reason) VD_LIM_##ID = (value),
  VD_LIMITS(VD_LIM_VALUE)
#undef VD_LIM_VALUE
};

/* The rows' indices. */
typedef enum {
#define VD_LIM_INDEX(ID, value, option, reason) VD_LIMI_##ID,
  VD_LIMITS(VD_LIM_INDEX)
#undef VD_LIM_INDEX
  VD_LIMI__COUNT
} vd_limit_id;

typedef struct {
  const char *name;   /* "STAGE_TIMEOUT_MS" */
  long long value;
  const char *option; /* overriding command-line option, or NULL */
  const char *reason;
} vd_limit_info;

extern const vd_limit_info vd_limits[VD_LIMI__COUNT];

#endif
