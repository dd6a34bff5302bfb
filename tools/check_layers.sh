#!/bin/sh
# tools/check_layers.sh - fails when a module includes a header of a module
# above it in the pipeline.  The order is written once, here: a module may
# include its own headers and those of the modules listed before it.
#   common   allocator, diagnostics
#   plans    plan format, reader/writer, validation
#   gen      model generators (plans through the plans/ builder only)
#   ops      operator registry: arity, attributes, shapes, reduction, numerics
#   graph    SSA DAG of a plan
#   oracle   numeric executor (an independent judge: no lineage/stages/solver)
#   lineage  lineages between single-device and parallel tensors
#   noise    rounding-error bounds of a plan pair, real dumps against them
#   stages   cutting, shape reduction of a stage, canonical classes
#   solver   Z3 encodings, normal forms, stage solving
#   bugs     bug injection (plans API only, by design; see below)
#   verifier the verdict binary
# bugs/ is placed after solver only for ordering; ALLOWED_bugs narrows it.
# Second check (needs ctags): a module's header must not declare a function
# that a module above it defines - an upward link no include shows (the
# MoE encoders were once declared in ops/ops_moe.h, defined in solver/).
set -eu
cd "$(dirname "$0")/.."
LAYERS="common plans gen ops graph oracle lineage noise stages solver bugs verifier"
ALLOWED_bugs="common plans bugs"
fail=0
pos() { i=0; for l in $LAYERS; do [ "$l" = "$1" ] && { echo $i; return; }; i=$((i + 1)); done; echo -1; }
for mod in $LAYERS; do
  mp=$(pos "$mod")
  for f in "$mod"/*.c "$mod"/*.h; do
    [ -e "$f" ] || continue
    for inc in $(sed -n 's@^#include "\.\./\([a-z_]*\)/.*@\1@p' "$f"); do
      ip=$(pos "$inc")
      ok=1
      [ "$ip" -lt 0 ] && ok=0
      [ "$ip" -gt "$mp" ] && ok=0
      if [ "$mod" = bugs ]; then case " $ALLOWED_bugs " in *" $inc "*) ;; *) ok=0 ;; esac; fi
      if [ $ok = 0 ]; then
        echo "layering: $f includes $inc/ (order: $LAYERS)"
        fail=1
      fi
    done
  done
done
# Prototypes in headers against the module of their definition.
if command -v ctags >/dev/null 2>&1; then
  # external definitions only: a static function of another module is another function
  defs=$(ctags -x --c-kinds=f */*.c 2>/dev/null | awk '$5 != "static" { split($4, p, "/"); print $1, p[1] }')
  protos=$(ctags -x --c-kinds=p */*.h 2>/dev/null | awk '{ split($4, p, "/"); print $1, p[1], $4 }')
  up=$(printf '%s\n' "$protos" | while read -r name hmod hfile; do
    [ -n "$name" ] || continue
    dmod=$(printf '%s\n' "$defs" | awk -v n="$name" '$1 == n { print $2; exit }')
    [ -n "$dmod" ] || continue
    hp=$(pos "$hmod")
    dp=$(pos "$dmod")
    if [ "$hp" -ge 0 ] && [ "$dp" -gt "$hp" ]; then
      echo "layering: $hfile declares $name, defined in $dmod/ (order: $LAYERS)"
    fi
  done)
  if [ -n "$up" ]; then
    printf '%s\n' "$up"
    fail=1
  fi
else
  echo "skip layering of declarations (no ctags)"
fi
[ $fail = 0 ] && echo "ok   layering ($LAYERS; declarations in headers)"
exit $fail
