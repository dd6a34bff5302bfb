#!/usr/bin/python3
"""tests/ci/check_ci.py - checks of verdict's CI outputs for tests/e2e/50_ci_outputs.sh and
51_ci_workflow.sh (Debian's python3 with python3-jsonschema).

  check_ci.py report SCHEMA REPORT.json...    the JSON reports validate against docs/report.schema.json
  check_ci.py sarif SCHEMA FILE.sarif...      SARIF files validate against the OASIS SARIF 2.1.0 schema
                                              (draft-04) and say what verdict promises: one result per
                                              finding, ruleId = a rule of the driver, fingerprints
  check_ci.py junit FILE.xml...               JUnit counts agree with the test cases; names unique
  check_ci.py cases FILE.xml                  prints "classname|name|status" per test case, sorted
  check_ci.py counts FILE.xml                 prints "tests failures errors skipped" of the first suite
Exit 1 with the reason on the first file that does not pass.
"""
import json
import sys
import xml.etree.ElementTree as ET

import jsonschema


def fail(msg):
    print("check_ci: " + msg)
    sys.exit(1)


def errors(validator, doc):
    return sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))


def check_report(schema_path, files):
    schema = json.load(open(schema_path))
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    for f in files:
        errs = errors(v, json.load(open(f)))
        if errs:
            e = errs[0]
            fail("%s: %d schema error(s); first at %s: %s" % (f, len(errs), list(e.absolute_path), e.message[:300]))


def check_sarif(schema_path, files):
    schema = json.load(open(schema_path))
    jsonschema.Draft4Validator.check_schema(schema)
    v = jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())
    for f in files:
        doc = json.load(open(f))
        errs = errors(v, doc)
        if errs:
            e = errs[0]
            fail("%s: %d SARIF schema error(s); first at %s: %s" % (f, len(errs), list(e.absolute_path), e.message[:300]))
        if doc.get("version") != "2.1.0" or len(doc["runs"]) != 1:
            fail("%s: not one SARIF 2.1.0 run" % f)
        run = doc["runs"][0]
        drv = run["tool"]["driver"]
        if drv["name"] != "verdict" or not drv.get("version"):
            fail("%s: tool.driver lacks name or version" % f)
        rules = [r["id"] for r in drv["rules"]]
        for r in drv["rules"]:
            if not r.get("help", {}).get("text") or not r.get("shortDescription", {}).get("text"):
                fail("%s: rule %s has no help or description text" % (f, r["id"]))
        for res in run["results"]:
            if rules[res["ruleIndex"]] != res["ruleId"]:
                fail("%s: ruleIndex %d is not %s" % (f, res["ruleIndex"], res["ruleId"]))
            if not res["message"]["text"] or not res.get("partialFingerprints"):
                fail("%s: a result without message or fingerprint" % f)


def suites(path):
    root = ET.parse(path).getroot()
    if root.tag != "testsuites":
        fail("%s: root is <%s>, not <testsuites>" % (path, root.tag))
    return root, root.findall("testsuite")


def status(tc):
    for s in ("failure", "error", "skipped"):
        if tc.find(s) is not None:
            return s
    return "pass"


def check_junit(files):
    for f in files:
        root, ss = suites(f)
        tot = {"tests": 0, "failures": 0, "errors": 0}
        for s in ss:
            cases = s.findall("testcase")
            st = [status(c) for c in cases]
            want = {"tests": len(cases), "failures": st.count("failure"), "errors": st.count("error"),
                    "skipped": st.count("skipped")}
            for k, n in want.items():
                if int(s.get(k)) != n:
                    fail("%s: suite %s: %s=%s but %d test cases say so" % (f, s.get("name"), k, s.get(k), n))
            for k in tot:
                tot[k] += want[k]
            names = [(c.get("classname"), c.get("name")) for c in cases]
            if len(set(names)) != len(names):
                fail("%s: suite %s: test names repeat" % (f, s.get("name")))
            if cases[0].get("name") != "outcome":
                fail("%s: suite %s does not start with its outcome" % (f, s.get("name")))
        for k, n in tot.items():
            if int(root.get(k)) != n:
                fail("%s: testsuites %s=%s, the suites add up to %d" % (f, k, root.get(k), n))


def main(argv):
    if len(argv) < 3:
        fail(__doc__)
    cmd = argv[1]
    if cmd == "report":
        check_report(argv[2], argv[3:])
    elif cmd == "sarif":
        check_sarif(argv[2], argv[3:])
    elif cmd == "junit":
        check_junit(argv[2:])
    elif cmd == "cases":
        _, ss = suites(argv[2])
        for line in sorted("%s|%s|%s" % (c.get("classname"), c.get("name"), status(c))
                           for s in ss for c in s.findall("testcase")):
            print(line)
    elif cmd == "counts":
        _, ss = suites(argv[2])
        print(" ".join(ss[0].get(k) for k in ("tests", "failures", "errors", "skipped")))
    else:
        fail("unknown command " + cmd)


if __name__ == "__main__":
    main(sys.argv)
