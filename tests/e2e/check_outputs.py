#!/usr/bin/python3
"""check_outputs.py [--verdict WORD] FILE...: each output of verdict is
well-formed for what it is, whatever the names in the plans were.

  *.json             UTF-8, parses (json, strict: no NaN, no duplicate keys)
  *.xml *.html *.svg UTF-8, parses as XML 1.0 (xml.etree)
  anything else      plain text for a terminal: UTF-8, no control character
                     but newline (C0, DEL, C1), no U+2028/9, bidi control or
                     U+FFFE/F, and no line that reads as a verdict except the
                     first line when --verdict WORD names it.
Prints every problem; exit 1 if any.  Debian's /usr/bin/python3."""
import json
import sys
import xml.etree.ElementTree as ET

UNSAFE = set(range(0x20)) - {0x0a} | set(range(0x7f, 0xa0)) | {0x2028, 0x2029, 0x200e, 0x200f, 0xfffe, 0xffff} \
    | set(range(0x202a, 0x202f)) | set(range(0x2066, 0x206a))
VERDICTS = ("EQUIVALENT", "NOT EQUIVALENT", "INCONCLUSIVE")


def no_dup(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


def bad_const(x):
    raise ValueError("non-standard constant " + x)


def check(path, verdict):
    raw = open(path, "rb").read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return ["%s: not UTF-8: %s" % (path, e)]
    if path.endswith(".json"):
        try:
            json.loads(text, object_pairs_hook=no_dup, parse_constant=bad_const)
        except ValueError as e:
            return ["%s: not JSON: %s" % (path, e)]
        return []
    if path.endswith((".xml", ".html", ".svg")):
        try:
            ET.fromstring(raw)
        except ET.ParseError as e:
            return ["%s: not well-formed XML: %s" % (path, e)]
        return []
    errs = []
    bad = sorted({"U+%04X" % ord(c) for c in text if ord(c) in UNSAFE})
    if bad:
        errs.append("%s: raw control characters %s" % (path, " ".join(bad)))
    forged = []
    for i, line in enumerate(text.split("\n")):
        if i == 0 and verdict is not None:
            if line != verdict:
                errs.append("%s: first line %r, expected %r" % (path, line[:80], verdict))
            continue
        if line.startswith(VERDICTS):
            forged.append(i + 1)
    if forged:
        errs.append("%s: %d line(s) read as a verdict, the first line %d" % (path, len(forged), forged[0]))
    return errs


def main():
    args = sys.argv[1:]
    verdict = None
    if args[:1] == ["--verdict"]:
        verdict, args = args[1], args[2:]
    errs = []
    for p in args:
        errs += check(p, verdict if not p.endswith((".json", ".xml", ".html", ".svg")) else None)
    for e in errs:
        print(e)
    sys.exit(1 if errs else 0)


if __name__ == "__main__":
    main()
