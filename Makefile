# verdict - build, test, demo.  See README.md.
#
# Layout: every .c under the module folders goes into build/libverdict.a,
# except verifier/main.c which is the CLI.  Tests are discovered: each
# tests/<module>/test_*.c is one cmocka binary; tests/e2e/*.sh are
# end-to-end scripts run against bin/verdict.

CC      ?= gcc
MODULES := common plans gen ops graph oracle lineage noise stages solver verifier bugs
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -fopenmp
OPT     ?= -O2 -g
LIBS    := -lmsgpackc -lz3 -lgmp -lcrypto -ljansson -lm -fopenmp
# igraph is the unit tests' reference only (tests/graph/test_topo.c checks
# graph/topo.c's order against igraph_topological_sorting): verdict itself
# does not link it (README.md, "Dependencies").
TEST_IGRAPH := -I/usr/include/igraph -ligraph
BUILD   ?= build
BIN     ?= bin
EXTRA_CFLAGS ?=
EXTRA_LDFLAGS ?=
CFLAGS  := $(CFLAGS_BASE) $(OPT) $(EXTRA_CFLAGS)

# What `make demo` needs (build and run), and what the tests add: unit tests
# (cmocka), the Python tools and their tests (msgpack, torch), the fuzz target
# (clang with its libFuzzer runtime), the leak check (valgrind) and the
# pictures of the HTML report (graphviz's dot), the CI outputs' schema checks (jsonschema,
# xmllint; pip fetches the SARIF schema, tests/ci/sarif_schema.sh; yaml reads the example workflow),
# the report-writer fuzz target (libxml2, and clang's OpenMP runtime libomp).
DEMO_PACKAGES := libz3-dev libgmp-dev libmsgpack-dev libssl-dev libjansson-dev
DEB_PACKAGES := $(DEMO_PACKAGES) libcmocka-dev libigraph-dev python3 python3-msgpack universal-ctags \
                clang libclang-rt-dev valgrind python3-venv graphviz \
                python3-jsonschema python3-pip python3-yaml libxml2-utils libxml2-dev libomp-dev cvc5

LIB_SRC := $(filter-out verifier/main.c,$(foreach m,$(MODULES),$(wildcard $(m)/*.c)))
LIB_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRC))
TEST_SRC := $(wildcard tests/*/test_*.c)
TEST_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TEST_SUPPORT := $(wildcard tests/support/*.c)
E2E     := $(sort $(wildcard tests/e2e/[0-9]*.sh))


.PHONY: all deps deps-demo deps-debian test test-build unit e2e e2e-full asan demo fuzz fuzz-short fuzz-pickle fuzz-pickle-short clean bugs corpus bench valgrind lint torch-demo soundness noise-demo
all: $(BIN)/verdict

# Installs missing Debian packages (as root, or through sudo); does nothing
# when all are present.  `deps` also creates the PyTorch tools' Python
# environment (.venv, tools/requirements-torch.txt, pinned) from the Python
# package index; nothing outside the project is touched.
VENV := .venv
VENV_STAMP := $(VENV)/.verdict-pins
deps: PKGS = $(DEB_PACKAGES)
deps-demo: PKGS = $(DEMO_PACKAGES)
deps: deps-debian $(VENV_STAMP)
deps-demo: deps-debian
deps-debian:
	@missing=""; for p in $(PKGS); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# The Python environment (docs/torch.md): made once, and again when the pins change.
$(VENV_STAMP): tools/requirements-torch.txt | deps-debian
	@echo "make deps: creating $(VENV) (Debian's /usr/bin/python3) with $$(grep -c '==' $<) pinned packages" \
	  "from the Python package index: torch $$(sed -n 's/^torch==//p' $<) and the CUDA runtime its Linux wheel" \
	  "pulls in (about 3.5 GB to download, 7 GB on disk; the capture runs on the CPU)"
	@[ -x $(VENV)/bin/python ] || /usr/bin/python3 -m venv $(VENV)
	@$(VENV)/bin/pip install --no-input --disable-pip-version-check -q -r $<
	@cp $< $@

$(BUILD)/%.o: %.c $(wildcard */*.h) $(wildcard */*.def)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libverdict.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BIN)/verdict: $(BUILD)/verifier/main.o $(BUILD)/libverdict.a
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(EXTRA_LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/%: tests/%.c $(TEST_SUPPORT) $(BUILD)/libverdict.a $(wildcard tests/support/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-unused-parameter $(EXTRA_LDFLAGS) -o $@ $< $(TEST_SUPPORT) $(BUILD)/libverdict.a $(LIBS) \
	  $(TEST_IGRAPH) -lcmocka

unit: $(TEST_BIN)
	@fail=0; for t in $(TEST_BIN); do \
	  if ! $$t >$$t.log 2>&1; then echo "FAIL $$t"; cat $$t.log; fail=1; \
	  else echo "ok   $$t"; fi; done; exit $$fail

# A test-only verdict whose normal form has one rule flipped (solver/smt_poly_walk.c,
# VD_TEST_BREAK_NF: x / c -> x): tests/e2e/50_certificate.sh shows that
# `verdict recheck` and --cross-check catch the false proofs it makes.
BROKEN_NF := $(BUILD)/broken-nf/verdict
$(BROKEN_NF): $(BUILD)/verifier/main.o $(BUILD)/libverdict.a solver/smt_poly_walk.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DVD_TEST_BREAK_NF -c solver/smt_poly_walk.c -o $(BUILD)/broken-nf/smt_poly_walk.o
	$(CC) $(CFLAGS) $(EXTRA_LDFLAGS) -o $@ $(BUILD)/verifier/main.o $(BUILD)/broken-nf/smt_poly_walk.o $(BUILD)/libverdict.a $(LIBS)

e2e: $(BIN)/verdict $(BROKEN_NF)
	@fail=0; for t in $(E2E); do \
	  if ! VERDICT=$(CURDIR)/$(BIN)/verdict VERDICT_BROKEN_NF=$(CURDIR)/$(BROKEN_NF) sh $$t >$(BUILD)/$$(basename $$t).log 2>&1; then \
	    echo "FAIL $$t"; cat $(BUILD)/$$(basename $$t).log; fail=1; \
	  else echo "ok   $$t"; fi; done; exit $$fail

# e2e with the variant rows that repeat a covered mechanism (tests/e2e/torch_lib.sh full_rows).
e2e-full:
	VERDICT_E2E_FULL=1 $(MAKE) e2e

# The README's test command.  Pulls in deps so a fresh machine needs nothing else.
# Everything it compiles is built first, on every core (JOBS): on a fresh 2-core
# machine the builds are a fifth of the run; the checks then run one at a time.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test: deps
	$(MAKE) lint
	$(MAKE) -j$(JOBS) test-build
	$(MAKE) unit
	$(MAKE) e2e
	$(MAKE) bugs
	$(MAKE) soundness
	$(MAKE) fuzz-short

# No module includes a header of a module above it (order in the script),
# no file keeps the markers of an unresolved merge, and no function of the
# modules is over 150 lines but the shrinking list tools/long_functions.allow.
lint:
	@sh tools/check_layers.sh
	@sh tools/check_merge_markers.sh
	@/usr/bin/python3 tools/room_figures.py --check

# The bug-injection suite (docs/bugs.md): every class injected, caught by the
# numeric executor and by the verifier with the expected diagnosis; every
# unmutated plan equivalent.  Prints the table of docs/bugs.md.  Then a few
# representative rows on boundary-only plans (STRIP=1, lineages inferred;
# docs/bugs.md "Boundary-only plans"): a forward missing reduction (1), a
# backward one inside a fused adapter (5), a rank's constant (7), a
# schedule problem (14), a shape problem (20), the unreduced grad norm (23),
# each at both sites, with their correct configurations; the full stripped
# table is `VERIFY=1 STRIP=1 sh tests/bugs/run_suite.sh bin/verdict`.
STRIP_BUGS ?= 1 5 7 14 20 23
bugs: $(BIN)/verdict
	VERIFY=1 sh tests/bugs/run_suite.sh $(BIN)/verdict
	VERIFY=1 STRIP=1 EXTRA=0 VERIFY_TIMEOUT=60 BUGS="$(STRIP_BUGS)" sh tests/bugs/run_suite.sh $(BIN)/verdict

# The soundness fuzzer (tests/soundness/soundness.c): random mutations of
# generated plans judged by the verifier and by the oracle on unreduced
# shapes; fails on any EQUIVALENT the oracle contradicts.  N mutants (default
# 400, about a minute; N=10000 for the long run), fixed seed.
N ?= 400
# The same fuzzer on boundary-only plans (--strip, issue 26): every lineage
# but the boundary's is inferred, and the kinds drawn add the rewrites
# inference must see through (split scales, loss scaling then unscaling,
# mean as sum x 1/count, a renamed plan).  Each verification is cut off at
# STRIP_DEADLINE s (INCONCLUSIVE, counted); the normal form's Z3 cross-check
# runs in the annotated run above only (on stripped plans Z3's asserts of
# the largest stages take minutes and cannot be interrupted).
N_STRIP ?= 100
STRIP_DEADLINE ?= 20
$(BUILD)/soundness: tests/soundness/soundness.c $(BUILD)/libverdict.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(EXTRA_LDFLAGS) -o $@ $< $(BUILD)/libverdict.a $(LIBS)
soundness: $(BUILD)/soundness
	$(BUILD)/soundness -n $(N) --max-false-alarms 0 --out $(BUILD)/soundness.d
	$(BUILD)/soundness --strip -n $(N_STRIP) --deadline $(STRIP_DEADLINE) --no-cross-check --max-false-alarms 0 --max-inconclusive 0 --out $(BUILD)/soundness-strip.d

# The nnScaler corpus (../shared/corpus): convert every pair, verify it and
# run the oracle on it; the table (docs/corpus.md) also lands in $(BUILD)/corpus.md.
CORPUS ?= ../shared/corpus
corpus: $(BIN)/verdict
	@mkdir -p $(BUILD); sh tools/corpus_run.sh $(BIN)/verdict $(CORPUS)/nnscaler >$(BUILD)/corpus.md; \
	  rc=$$?; cat $(BUILD)/corpus.md; exit $$rc

# The main paths under valgrind (leaks and memory errors).
valgrind: $(BIN)/verdict
	sh tests/valgrind_main_paths.sh $(BIN)/verdict

# Benchmarks (figures, not tests).
bench: $(BIN)/verdict
	sh bench/verify_llama3_32.sh
	sh bench/gen405b.sh

# Whole suite under AddressSanitizer + UndefinedBehaviorSanitizer.
asan: deps
	$(MAKE) BUILD=build-asan BIN=bin-asan OPT="-O1 -g -fno-omit-frame-pointer" \
	  EXTRA_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all" \
	  EXTRA_LDFLAGS="-fsanitize=address,undefined" all unit e2e

# Reader fuzz target (libFuzzer, clang).  fuzz-short is part of `make test`.
FUZZ_BIN := $(BUILD)/fuzz/fuzz_plan_reader
$(FUZZ_BIN): tests/fuzz/fuzz_plan_reader.c $(LIB_SRC) $(wildcard */*.h)
	@mkdir -p $(dir $@)
	clang -std=c11 -D_GNU_SOURCE -g -O1 -fopenmp \
	  -fsanitize=fuzzer,address,undefined -o $@ tests/fuzz/fuzz_plan_reader.c \
	  common/*.c plans/*.c -lmsgpackc -lcrypto -lm
# Report-writer fuzz target (tests/fuzz/fuzz_report_writers.c): names from
# the fuzzer through every report format, each output parsed in-process
# (jansson, libxml2: linked here only).  The whole library, built by clang
# (with clang's OpenMP runtime, libomp-dev).
FUZZ_RW := $(BUILD)/fuzz/fuzz_report_writers
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fopenmp
FUZZ_LIB_OBJ := $(patsubst %.c,$(BUILD)/fuzz/obj/%.o,$(LIB_SRC))
$(BUILD)/fuzz/obj/%.o: %.c $(wildcard */*.h) $(wildcard */*.def)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined -c $< -o $@
$(FUZZ_RW): tests/fuzz/fuzz_report_writers.c $(FUZZ_LIB_OBJ)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -I/usr/include/libxml2 -fsanitize=fuzzer,address,undefined -o $@ $< $(FUZZ_LIB_OBJ) \
	  $(LIBS) -lxml2
# Every binary `make test` runs, built in parallel by make -jN test-build (after
# the fuzz targets: their names are needed here).
test-build: all $(TEST_BIN) $(BROKEN_NF) $(BUILD)/soundness $(FUZZ_BIN) $(FUZZ_RW)

fuzz-short: $(FUZZ_BIN) $(FUZZ_RW) fuzz-pickle-short
	@mkdir -p $(BUILD)/fuzz/corpus_rw
	$(FUZZ_RW) -max_total_time=10 -max_len=4096 -rss_limit_mb=2048 -artifact_prefix=$(BUILD)/fuzz/rw- \
	  $(BUILD)/fuzz/corpus_rw tests/fuzz/seeds_report >$(BUILD)/fuzz/log_rw 2>&1 \
	  || { tail -40 $(BUILD)/fuzz/log_rw; exit 1; }
	@echo "ok   fuzz report writers (10 s)"
	@mkdir -p $(BUILD)/fuzz/corpus
	$(FUZZ_BIN) -max_total_time=20 -max_len=65536 -rss_limit_mb=1024 -artifact_prefix=$(BUILD)/fuzz/ -dict=tests/fuzz/plan.dict \
	  $(BUILD)/fuzz/corpus tests/fuzz/seeds tests/fuzz/regressions >$(BUILD)/fuzz/log 2>&1 \
	  || { tail -40 $(BUILD)/fuzz/log; exit 1; }
	@echo "ok   fuzz (20 s)"
fuzz: $(FUZZ_BIN)
	@mkdir -p $(BUILD)/fuzz/corpus
	$(FUZZ_BIN) -max_total_time=600 -max_len=65536 -dict=tests/fuzz/plan.dict -artifact_prefix=tests/fuzz/regressions/ \
	  $(BUILD)/fuzz/corpus tests/fuzz/seeds tests/fuzz/regressions

# The nnScaler importer's fuzzer (tests/fuzz/fuzz_unpickler.py, issue 29): seeded
# mutations of corpus and hostile pickles; every input must end in success or one
# line and exit 2 (no traceback, signal, hang or unbounded memory, nothing run).
# 20 s in `make test` (fuzz-short); `make fuzz-pickle` runs 10 minutes
# (PICKLE_SECONDS, PICKLE_SEED); findings land in $(BUILD)/fuzz-unpickler/.
PICKLE_SECONDS ?= 600
PICKLE_SEED ?= 1
fuzz-pickle-short: $(BIN)/verdict
	@/usr/bin/python3 tests/fuzz/fuzz_unpickler.py --seconds 20 --verdict $(BIN)/verdict \
	  --artifacts $(BUILD)/fuzz-unpickler
fuzz-pickle: $(BIN)/verdict
	/usr/bin/python3 tests/fuzz/fuzz_unpickler.py --seconds $(PICKLE_SECONDS) --seed $(PICKLE_SEED) \
	  --verdict $(BIN)/verdict --artifacts $(BUILD)/fuzz-unpickler

demo: deps-demo
	$(MAKE) all
	@mkdir -p $(BUILD)/demo
	$(BIN)/verdict gen --model llama3 --layers 2 --hidden 64 --heads 4 --seq 16 --batch 8 \
	  --dp 2 --tp 2 --pp 2 --nm 2 --single $(BUILD)/demo/single.plan --parallel $(BUILD)/demo/tp2pp2dp2.plan
	$(BIN)/verdict plan stats $(BUILD)/demo/tp2pp2dp2.plan
	$(BIN)/verdict --sm $(BUILD)/demo/single.plan --pm $(BUILD)/demo/tp2pp2dp2.plan

# PyTorch capture (docs/torch.md): the tiny Llama of examples/torch, single-device and parallel,
# captured by tools/torch2plan and verified.  CONFIG picks configurations (default all);
# BUG=name runs one hand-written bug (llama_parallel.py) and expects NOT EQUIVALENT.
torch-demo: all
	@sh examples/torch/demo.sh $(CURDIR)/$(BIN)/verdict $(if $(BUG),bug=$(BUG),$(CONFIG))

# Noise or bug (docs/noise.md): the same programs run for real in float32 and bfloat16, their
# values dumped and compared against the plan's rounding bounds (verdict compare): every correct
# configuration within rounding, then every bug (the plan's and two outside it) beyond rounding.
# CONFIG / BUG=name (several: BUG="lowprec data") narrow it; DTYPES="float32" one precision.
NOISE_BUGS := no_allreduce grad_scale pp_recv dp_noavg no_sp_gather tie_noreduce lowprec data
noise-demo: all
	@if [ -n "$(BUG)" ]; then sh examples/torch/noise_demo.sh $(CURDIR)/$(BIN)/verdict $(foreach b,$(BUG),bug=$(b)); \
	else sh examples/torch/noise_demo.sh $(CURDIR)/$(BIN)/verdict $(CONFIG) && \
	  sh examples/torch/noise_demo.sh $(CURDIR)/$(BIN)/verdict $(foreach b,$(NOISE_BUGS),bug=$(b)); fi

clean:
	rm -rf build build-asan bin bin-asan
