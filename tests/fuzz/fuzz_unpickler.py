#!/usr/bin/python3
"""tests/fuzz/fuzz_unpickler.py - a mutation fuzzer of the nnScaler importer
(tools/nnscaler2plan: the inert unpickler tools/nnscaler/pickle_safe.py, the converter and
the integer bounds), issue 29.

    /usr/bin/python3 tests/fuzz/fuzz_unpickler.py [--seconds S | --runs N] [--seed N] [--timeout T] [--mem-mb M]
          [--artifacts DIR] [--verdict BIN] [--corpus DIR] [--importer SCRIPT]

Property: every input ends in success, or in exit 2 with exactly one line on stderr that
names the input and is not an internal error; never a traceback, a crash signal, a hang
(each input has --timeout seconds), memory beyond --mem-mb (the child runs under that
address-space limit, and "out of memory" from outside the unpickler's own cap is a finding),
or code from the pickle run (the hostile seeds call os.system and friends on a canary file).
With --verdict, a success must give two plans that `verdict plan validate` accepts, except
that a plan verdict refuses in one line for its structure (a send whose receive half the
mutation altered), not for an integer, is counted as ok-plan-refused-by-verdict: the importer
promises integers verdict accepts (tools/nnscaler/bounds.py), verdict checks structure.

How: deterministic (random.Random(seed)), standard library only, Debian's /usr/bin/python3
(python3-msgpack).  The importer is loaded once; each input runs its real entry point
(nnscaler2plan's run(), the same as the command line) in a forked child, as the parallel
pickle of a pair whose single pickle is fixed, or every 4th input as the single one.
Inputs are mutations of seeds: the smallest corpus pickles (frames dropped, so opcodes can
change length), hand-made hostile pickles and every file of tests/fuzz/pickle-regressions/.
Mutations: bytes (flip, set, insert, delete, duplicate, truncate), opcodes (an integer
replaced by a boundary value, a float by inf/nan, an opcode deleted, duplicated, swapped or
replaced by a random one, a run of nesting opcodes inserted, a global renamed), and splices
of two inputs.  A finding is saved under --artifacts as <reason>-<sha1>.pkl (replay:
`nnscaler2plan --sm SINGLE --pm FILE ...`); the exit code is 1 if there was one.
"""
import argparse
import glob
import hashlib
import importlib.machinery
import importlib.util
import os
import random
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import picklelib as pl  # noqa: E402

CANARY_NAME = "pwned"
# verdict's messages about an integer out of its range (plans/io.c, plans/validate.c)
INTEGER_WORDS = ("expected an integer", "int64", "2^31", "overflow", "expected a degree", "positive size",
                 "expected a part", "part k", "slice start", "stored rank in", "segment index in")

INTERESTING_INTS = [0, 1, -1, 2, 255, 256, 65535, 2 ** 31 - 1, 2 ** 31, -2 ** 31, 2 ** 32, 2 ** 62, 2 ** 63 - 1,
                    2 ** 63, -2 ** 63, 2 ** 64, 2 ** 70, -2 ** 70, 10 ** 30]
INTERESTING_FLOATS = [float("inf"), float("-inf"), float("nan"), 1e308, -0.0, 5e-324]
NEST_OPS = [pl.pickle.TUPLE1, pl.pickle.TUPLE2, pl.pickle.TUPLE3, pl.pickle.EMPTY_LIST + pl.pickle.APPEND,
            pl.pickle.LIST, pl.pickle.TUPLE, pl.pickle.FROZENSET, pl.pickle.DICT]
GLOBALS = [("os", "system"), ("posix", "system"), ("builtins", "eval"), ("builtins", "exec"),
           ("builtins", "getattr"), ("subprocess", "call"), ("builtins", "set"), ("builtins", "tuple"),
           ("collections", "OrderedDict"), ("copyreg", "_reconstructor"), ("numpy", "dtype"),
           ("numpy.core.multiarray", "scalar"), ("torch", "float32"), ("builtins", "slice"),
           ("builtins", "bytearray"), ("builtins", "complex"), ("builtins", "frozenset")]


def load_importer(path):
    loader = importlib.machinery.SourceFileLoader("nnscaler2plan_fuzzed", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def hostile_seeds(canary):
    """Small hand-made pickles aimed at the unpickler: code execution, nesting, memo and
    length fields, trailing bytes."""
    P = pl.pickle
    cmd = ("touch " + canary).encode()
    s = [
        b"cos\nsystem\n(V" + cmd + b"\ntR.",
        b"cbuiltins\neval\n(V__import__('os').system('" + cmd + b"')\ntR.",
        b"\x80\x04cbuiltins\nexec\nV__import__('os').system('" + cmd + b"')\n\x85R.",
        b"\x80\x04\x95\x20\x00\x00\x00\x00\x00\x00\x00cposix\nsystem\nV" + cmd + b"\n\x85R.",
        b"cbuiltins\ngetattr\n(cbuiltins\nobject\nV__subclasses__\ntR)R.",
        b"cbuiltins\nset\n(]tRcbuiltins\nlist\n}b.",          # BUILD on a class
        b"\x80\x02cbuiltins\nobject\n)\x81}(V__class__\ncposix\nsystem\nub.",
        pl.deep_tuple_key(200000), pl.deep_list(3000), pl.deep_tuple_key(1100), pl.colliding_keys(5000),
        P.PROTO + b"\x04" + P.NONE + P.LONG_BINPUT + struct.pack("<I", 2 ** 31) + P.STOP,
        P.PROTO + b"\x04" + P.BINBYTES8 + struct.pack("<Q", 2 ** 62) + b"xx" + P.STOP,
        P.PROTO + b"\x05" + P.BYTEARRAY8 + struct.pack("<Q", 2 ** 40) + P.STOP,
        P.PROTO + b"\x04" + P.FRAME + struct.pack("<Q", 2 ** 60) + P.NONE + P.STOP,
        P.PROTO + b"\x02" + P.LONG4 + struct.pack("<I", 3000) + b"\x7f" * 3000 + P.STOP,
        b"L" + b"9" * 5000 + b"L\n.",
        P.PROTO + b"\x02" + P.NONE + P.STOP + b"trailing",
        P.PROTO + b"\x02" + P.EMPTY_DICT + P.MARK + P.NONE + P.TUPLE1 * 900 + P.NONE + P.SETITEMS + P.STOP,
        P.PROTO + b"\x02" + P.BINGET + b"\x07" + P.STOP,
        P.PROTO + b"\x02" + P.MARK * 100000 + P.STOP,
    ]
    return [bytes(x) for x in s]


class Fuzzer:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.work = tempfile.mkdtemp(prefix="fuzz-unpickler.")
        self.canary = os.path.join(self.work, CANARY_NAME)
        self.mod = load_importer(a.importer)
        # run() is the command line's entry point; an importer without one (before issue 29)
        # is called through main(), an exception then being a finding.
        self.entry = getattr(self.mod, "run", None) or self.mod.main
        pkls = sorted(glob.glob(os.path.join(a.corpus, "*.pkl")), key=os.path.getsize)
        if not pkls:
            sys.exit("fuzz_unpickler: no corpus pickles in %s" % a.corpus)
        mlp = [p for p in pkls if os.path.basename(p).startswith("mlp_")] or pkls
        self.single = next((p for p in mlp if "_dp1_pp1_tp1_" in p), mlp[0])
        tag = os.path.basename(self.single).split("_dp1_")[0]  # its parallel partner: same model
        self.parallel = next((p for p in mlp if os.path.basename(p).startswith(tag) and "_dp1_pp1_tp1_" not in p),
                             self.single)
        corpus = [open(p, "rb").read() for p in mlp[:3]]
        self.corpus_ops = [pl.raw_ops(d) for d in corpus]
        self.n_corpus = len(corpus)
        self.corpus_ints = [[j for j, (n, _, _) in enumerate(o) if n in ("BININT", "BININT1", "BININT2", "LONG1")]
                            for o in self.corpus_ops]
        self.seeds = [pl.join(o) for o in self.corpus_ops] + hostile_seeds(self.canary)
        self.seeds += [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(HERE, "pickle-regressions", "*.pkl")))]
        self.ops_cache = {}
        self.runs = self.findings = 0
        self.outcomes = {}

    # ---- mutations ----------------------------------------------------------
    def ops_of(self, data):
        key = hashlib.sha1(data).digest()
        ops = self.ops_cache.get(key)
        if ops is None:
            try:
                ops = pl.raw_ops(data)
            except Exception:
                ops = []
            if len(self.ops_cache) < 64:
                self.ops_cache[key] = ops
        return list(ops)

    def mutate_bytes(self, d):
        r = self.rng
        b = bytearray(d)
        for _ in range(r.choice((1, 1, 2, 4, 8))):
            if not b:
                b = bytearray(b".")
            k = r.randrange(6)
            i = r.randrange(len(b))
            if k == 0:
                b[i] ^= 1 << r.randrange(8)
            elif k == 1:
                b[i] = r.choice((0, 0xff, 0x7f, 0x80, r.randrange(256)))
            elif k == 2:
                b[i:i] = bytes(r.randrange(256) for _ in range(r.randint(1, 8)))
            elif k == 3:
                del b[i:i + r.randint(1, 16)]
            elif k == 4:
                j = r.randrange(len(b))
                b[i:i] = b[j:j + r.randint(1, 64)]
            else:
                del b[r.randint(1, len(b)):]
        return bytes(b)

    def mutate_ops(self, d):
        r = self.rng
        ops = self.ops_of(d)
        if len(ops) < 3:
            return self.mutate_bytes(d)
        for _ in range(r.choice((1, 1, 2, 3))):
            i = r.randrange(len(ops) - 1)  # never the STOP
            name = ops[i][0]
            k = r.randrange(8)
            if k <= 1:
                ints = [j for j in range(max(0, i - 200), min(len(ops) - 1, i + 200))
                        if ops[j][0] in ("BININT", "BININT1", "BININT2", "LONG1", "LONG4")]
                if ints:
                    j = r.choice(ints)
                    v = r.choice(INTERESTING_INTS) if r.random() < 0.8 else r.randint(-2 ** 40, 2 ** 40)
                    ops[j] = ("RAW", None, pl.enc_int(v))
            elif k == 2 and name in ("BINFLOAT", "FLOAT"):
                ops[i] = ("RAW", None, pl.enc_float(r.choice(INTERESTING_FLOATS)))
            elif k == 2:
                del ops[i]
            elif k == 3:
                ops.insert(i, ops[i])
            elif k == 4:
                j = r.randrange(len(ops) - 1)
                ops[i], ops[j] = ops[j], ops[i]
            elif k == 5:
                op = r.choice(list(pl.pickletools.opcodes))
                arg = bytes(r.randrange(256) for _ in range(r.choice((0, 1, 2, 4, 8))))
                ops[i] = ("RAW", None, op.code.encode("latin-1") + arg)
            elif k == 6:
                run = r.choice(NEST_OPS) * r.choice((10, 500, 1100, 5000, 200000))
                mark = pl.pickle.MARK * (run.count(pl.pickle.LIST) + run.count(pl.pickle.TUPLE) +
                                         run.count(pl.pickle.FROZENSET) + run.count(pl.pickle.DICT))
                ops.insert(i, ("RAW", None, mark + pl.pickle.NONE + run))
            else:
                mod, nm = r.choice(GLOBALS)
                ops.insert(i, ("RAW", None, b"c%s\n%s\n" % (mod.encode(), nm.encode())))
        return pl.join(ops)

    def mutate_ints(self):
        """A corpus seed with one or two of its integers set to boundary values: the plan
        stays well formed, so the value reaches the converter, the bounds and the writer."""
        r = self.rng
        i = r.randrange(self.n_corpus)
        ops = list(self.corpus_ops[i])
        for _ in range(r.choice((1, 1, 2))):
            j = r.choice(self.corpus_ints[i])
            v = r.choice(INTERESTING_INTS) if r.random() < 0.85 else r.randint(-2 ** 40, 2 ** 40)
            ops[j] = ("RAW", None, pl.enc_int(v))
        return pl.join(ops)

    def splice(self, a, b):
        r = self.rng
        i, j = r.randrange(len(a) + 1), r.randrange(len(b) + 1)
        return a[:i] + b[j:]

    def next_input(self):
        r = self.rng
        base = r.choice(self.seeds)
        k = r.random()
        if k < 0.35:
            return self.mutate_ints()
        if k < 0.6:
            return self.mutate_ops(base)
        if k < 0.85:
            return self.mutate_bytes(base)
        return self.splice(base, r.choice(self.seeds))

    # ---- one run ----------------------------------------------------------
    def run_one(self, data, as_single):
        inp = os.path.join(self.work, "input.pkl")
        with open(inp, "wb") as f:
            f.write(data)
        out_s, out_p = os.path.join(self.work, "out.s.plan"), os.path.join(self.work, "out.p.plan")
        for p in (out_s, out_p):
            if os.path.exists(p):
                os.unlink(p)
        argv = ["--sm", inp, "--pm", self.parallel, "--single", out_s, "--parallel", out_p] if as_single else \
            ["--sm", self.single, "--pm", inp, "--single", out_s, "--parallel", out_p]
        err = os.path.join(self.work, "stderr")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(fd, 2)
                nul = os.open(os.devnull, os.O_WRONLY)
                os.dup2(nul, 1)
                lim = self.a.mem_mb << 20
                resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
                code = self.entry(argv)
                sys.stderr.flush()
            except SystemExit as e:  # main() of an importer without run()
                sys.stderr.flush()
                code = e.code if isinstance(e.code, int) else 2
            except BaseException:  # the importer's run() must not raise: a finding
                import traceback
                traceback.print_exc()
                code = 71
            finally:
                os._exit(code if isinstance(code, int) else 72)
        t0 = time.time()
        status = None
        while time.time() - t0 < self.a.timeout:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = st
                break
            time.sleep(0.005)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hang", ""
        with open(err, errors="replace") as f:
            text = f.read()
        if os.WIFSIGNALED(status):
            return "signal%d" % os.WTERMSIG(status), text
        rc = os.WEXITSTATUS(status)
        lines = text.splitlines()
        if os.path.exists(self.canary):
            return "code-ran", text
        if rc == 0:
            if self.a.verdict:
                for p in (out_s, out_p):
                    v = subprocess.run([self.a.verdict, "plan", "validate", p], capture_output=True, text=True)
                    if v.returncode != 0:
                        # An integer verdict refuses is a finding (bounds.py promises none); a
                        # structure broken by the mutation (a send without its recv) is verdict's
                        # to refuse, and it did, with exit 2 and one line: counted, not a finding.
                        if v.returncode == 2 and len(v.stderr.splitlines()) == 1 and not any(
                                w in v.stderr for w in INTEGER_WORDS):
                            return "ok-plan-refused-by-verdict", v.stderr
                        return "plan-refused", v.stderr
            return "ok", text
        if rc != 2:
            return "exit%d" % rc, text
        if len(lines) != 1 or not lines[0].startswith("nnscaler2plan: "):
            return "not-one-line", text
        if "Traceback" in text or "internal error" in text:
            return "internal-error", text
        if lines[0] == "nnscaler2plan: out of memory":
            return "out-of-memory", text
        if inp not in lines[0] and self.single not in lines[0] and self.parallel not in lines[0]:
            return "file-not-named", text
        return "refused", text

    def save(self, reason, data, text):
        os.makedirs(self.a.artifacts, exist_ok=True)
        name = "%s-%s.pkl" % (reason, hashlib.sha1(data).hexdigest()[:16])
        with open(os.path.join(self.a.artifacts, name), "wb") as f:
            f.write(data)
        print("FINDING %s: %s (%d bytes)\n  %s" % (reason, name, len(data),
                                                   "\n  ".join(text.strip().splitlines()[-5:])))

    def loop(self):
        t0 = time.time()
        # every seed once as it is, then mutations
        queue = list(self.seeds)
        while True:
            if self.a.runs and self.runs >= self.a.runs:
                break
            if not self.a.runs and time.time() - t0 >= self.a.seconds:
                break
            data = queue.pop(0) if queue else self.next_input()
            as_single = self.runs % 4 == 3
            reason, text = self.run_one(data, as_single)
            self.runs += 1
            self.outcomes[reason] = self.outcomes.get(reason, 0) + 1
            if reason not in ("ok", "refused", "ok-plan-refused-by-verdict"):
                self.findings += 1
                self.save(reason, data, text)
                if os.path.exists(self.canary):
                    os.unlink(self.canary)
        dt = time.time() - t0
        print("fuzz_unpickler: %d inputs in %.1f s (seed %d): %s; %d finding(s)"
              % (self.runs, dt, self.a.seed, ", ".join("%s %d" % kv for kv in sorted(self.outcomes.items())),
                 self.findings))
        return 1 if self.findings else 0


def main():
    ap = argparse.ArgumentParser(description="mutation fuzzer of tools/nnscaler2plan (issue 29)")
    ap.add_argument("--seconds", type=float, default=20.0, help="run time (default 20)")
    ap.add_argument("--runs", type=int, default=0, help="number of inputs instead of a time (deterministic)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per input before it is a hang")
    ap.add_argument("--mem-mb", type=int, default=2048, help="address-space limit of each input's run")
    ap.add_argument("--artifacts", default=os.path.join(ROOT, "build", "fuzz-unpickler"))
    ap.add_argument("--verdict", default="", help="bin/verdict: successes must validate")
    ap.add_argument("--importer", default=os.path.join(ROOT, "tools", "nnscaler2plan"),
                    help="the nnscaler2plan script to fuzz (default: this tree's)")
    ap.add_argument("--corpus", default=os.path.join(ROOT, "..", "shared", "corpus", "nnscaler"))
    a = ap.parse_args()
    if not os.path.isdir(a.corpus):
        print("fuzz_unpickler: skip: no corpus at %s" % a.corpus)
        return 0
    f = Fuzzer(a)
    try:
        return f.loop()
    finally:
        import shutil
        shutil.rmtree(f.work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
