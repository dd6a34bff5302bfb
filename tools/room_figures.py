#!/usr/bin/python3
"""tools/room_figures.py - the size figures of issue 31, measured one way.

Prints the lines of C (module folders and tests/), the functions over 80
and over 150 lines, the files over 1,000 lines and the duplicate pairs
(the `duplicates` command, `--most 200`, as the issue counted them).

A function's length is its lines from the line ctags gives as its start
(`ctags --fields=+ne`: the signature) to its closing brace, both counted.

  tools/room_figures.py            the figures (the duplicate count takes
                                   up to a minute; --no-dup skips it)
  tools/room_figures.py --check    make lint: fails when a function of the
                                   modules is over 150 lines and is not in
                                   tools/long_functions.allow, or when an entry
                                   of that list is no longer over 150 lines
                                   (remove it: the list only shrinks)

Runs with Debian's /usr/bin/python3 (standard library only) and needs
ctags (Universal Ctags).
"""
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MODULES = ["common", "plans", "gen", "ops", "graph", "oracle", "lineage", "noise", "stages", "solver", "bugs",
           "verifier"]
ALLOW = os.path.join("tools", "long_functions.allow")
LONG, VERY_LONG, BIG_FILE = 80, 150, 1000


def c_files(top):
    out = []
    for d, dirs, files in os.walk(os.path.join(ROOT, top)):
        dirs.sort()
        out += [os.path.relpath(os.path.join(d, f), ROOT) for f in sorted(files) if f.endswith((".c", ".h"))]
    return out


def module_files():
    return [f for m in MODULES if os.path.isdir(os.path.join(ROOT, m)) for f in c_files(m)]


def line_count(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return sum(1 for _ in f)


def code_line_count(path):
    """Lines that are neither blank nor only a comment."""
    n, in_comment = 0, False
    with open(os.path.join(ROOT, path), errors="replace") as f:
        for line in f:
            s = line.strip()
            if in_comment:
                in_comment = "*/" not in s
                continue
            if not s or s.startswith("//"):
                continue
            if s.startswith("/*"):
                in_comment = "*/" not in s
                continue
            n += 1
    return n


def functions(paths):
    """(length, file, line, name) of every function definition in paths."""
    srcs = [p for p in paths if p.endswith(".c")]
    if not srcs:
        return []
    r = subprocess.run(["ctags", "--c-kinds=f", "--fields=+ne", "-o", "-"] + srcs, cwd=ROOT,
                       capture_output=True, text=True, check=True)
    out = []
    for row in r.stdout.splitlines():
        cols = row.split("\t")
        start = re.search(r"\tline:(\d+)", row)
        end = re.search(r"\tend:(\d+)", row)
        if start and end:
            out.append((int(end.group(1)) - int(start.group(1)) + 1, cols[1], int(start.group(1)), cols[0]))
    return sorted(out, key=lambda t: (-t[0], t[1], t[2]))


def duplicate_pairs():
    r = subprocess.run(["duplicates", "--most", "200", "--seconds", "120"], cwd=ROOT, capture_output=True,
                       text=True)
    first = r.stdout.splitlines()[0] if r.stdout else ""
    m = re.match(r"\s*(\d+) pairs?", first)
    if "no duplicates" in first:
        return 0, first
    return (int(m.group(1)) if m else None), first


def allowlist():
    path = os.path.join(ROOT, ALLOW)
    names = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.append(line)
    return names


def check():
    """Fails on a function over 150 lines not in the list, and on a stale
    entry (the list of today's offenders only shrinks)."""
    fns = [f for f in functions(module_files()) if f[0] > VERY_LONG]
    allowed = allowlist()
    bad = 0
    for n, path, line, name in fns:
        if name not in allowed:
            print("%s:%d: function %s is %d lines (over %d; STYLE.md: under 80): cut it into functions that do "
                  "one thing" % (path, line, name, n, VERY_LONG))
            bad = 1
    long_names = {f[3] for f in fns}
    for name in allowed:
        if name not in long_names:
            print("%s: %s is no longer over %d lines: remove it from the list" % (ALLOW, name, VERY_LONG))
            bad = 1
    if not bad:
        print("ok   no function over %d lines but the %d of %s" % (VERY_LONG, len(allowed), ALLOW))
    return bad


def main(argv):
    if "--check" in argv:
        return check()
    mods, tests = module_files(), c_files("tests")
    present = " ".join(m for m in MODULES if os.path.isdir(os.path.join(ROOT, m)))
    print("lines of C (.c and .h), module folders (%s): %d (%d not blank or comment)" % (
        present, sum(line_count(f) for f in mods), sum(code_line_count(f) for f in mods)))
    print("lines of C (.c and .h), tests/: %d (%d not blank or comment)" % (
        sum(line_count(f) for f in tests), sum(code_line_count(f) for f in tests)))
    fns = functions(mods)
    over80 = [f for f in fns if f[0] > LONG]
    over150 = [f for f in fns if f[0] > VERY_LONG]
    print("functions over %d lines (modules): %d" % (LONG, len(over80)))
    for n, path, line, name in over80:
        print("  %4d %s:%d %s" % (n, path, line, name))
    print("functions over %d lines (modules): %d" % (VERY_LONG, len(over150)))
    for n, path, line, name in over150:
        print("  %4d %s:%d %s" % (n, path, line, name))
    big = sorted(((line_count(f), f) for f in mods), reverse=True)
    big = [b for b in big if b[0] > BIG_FILE]
    print("files over %d lines (modules): %d" % (BIG_FILE, len(big)))
    for n, path in big:
        print("  %5d %s" % (n, path))
    tfns = functions(tests)
    print("functions over %d lines (tests/, not counted above): %d" % (LONG, sum(1 for f in tfns if f[0] > LONG)))
    if "--no-dup" not in argv:
        n, first = duplicate_pairs()
        print("duplicate pairs (duplicates --most 200, whole tree): %s   [%s]" % (n if n is not None else "?", first))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
