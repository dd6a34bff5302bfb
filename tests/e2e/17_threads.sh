# Issue 15: every phase that runs in parallel (plan loading, graphs, lineage
# inference, the lineage table, the cut, reduction and classes, solving)
# gives the serial result at any thread count: the report, the JSON verdicts
# and every stage dumped are byte-identical at 1, 2 and 3 threads, on plans
# that reach the parallel paths (replicas, microbatches, sums by part, EP,
# inferred lineages with failed candidates dropped).
. "$(dirname "$0")/lib.sh"
set -e
# same_at_thread_counts TAG EXIT SINGLE PARALLEL
same_at_thread_counts() {
  tag=$1; want=$2; s=$3; p=$4
  for t in 1 2 3; do
    expect_exit "$want" "$VERDICT" -q --threads "$t" --sm "$s" --pm "$p" --dump-stages "$TMP/$tag.$t.dump" \
      --json "$TMP/$tag.$t.json"
    cp "$TMP/out" "$TMP/$tag.$t.out"
    # the JSON report carries timings: compare all but them
    grep -v '"seconds"\|"peak_' "$TMP/$tag.$t.json" >"$TMP/$tag.$t.jv" || true
  done
  [ -s "$TMP/$tag.1.dump" ] || fail "$tag: empty stage dump"
  for t in 2 3; do
    cmp -s "$TMP/$tag.1.out" "$TMP/$tag.$t.out" || fail "$tag: report differs between 1 and $t threads"
    cmp -s "$TMP/$tag.1.dump" "$TMP/$tag.$t.dump" || fail "$tag: stages differ between 1 and $t threads"
    cmp -s "$TMP/$tag.1.jv" "$TMP/$tag.$t.jv" || fail "$tag: JSON report differs between 1 and $t threads"
  done
  echo "ok: $tag identical at 1, 2 and 3 threads"
}

# Dense: data, tensor and pipeline parallel with microbatches and ZeRO-1 Adam.
"$VERDICT" gen --model llama3 --layers 2 --hidden 32 --heads 4 --seq 8 --batch 16 --dp 4 --tp 2 --pp 2 --nm 2 \
  --zero 1 --optimizer adam --single "$TMP/l.s" --parallel "$TMP/l.p" >/dev/null
same_at_thread_counts llama 0 "$TMP/l.s" "$TMP/l.p"

# MoE with expert parallelism: sums by part over replicas x microbatches.
"$VERDICT" gen --model moe --layers 2 --hidden 32 --heads 4 --seq 8 --batch 16 --experts 4 --topk 2 \
  --dp 2 --ep 2 --tp 2 --pp 2 --nm 2 --single "$TMP/m.s" --parallel "$TMP/m.p" >/dev/null
same_at_thread_counts moe 0 "$TMP/m.s" "$TMP/m.p"

# Inferred lineages, and a bug that makes candidates fail and be dropped.
expect_exit 0 "$VERDICT" plan strip --keep boundary "$TMP/l.p" "$TMP/ls.p"
same_at_thread_counts stripped 0 "$TMP/l.s" "$TMP/ls.p"
"$VERDICT" gen --model llama3 --layers 2 --hidden 32 --heads 4 --seq 8 --batch 4 --dp 2 --tp 2 --pp 2 --nm 2 \
  --single "$TMP/d.s" --parallel "$TMP/d.p" >/dev/null
expect_exit 0 "$VERDICT" mutate --bug 1 --rank 0 "$TMP/d.p" "$TMP/db.p"
expect_exit 0 "$VERDICT" plan strip --keep boundary "$TMP/db.p" "$TMP/dbs.p"
same_at_thread_counts stripped-bug 1 "$TMP/d.s" "$TMP/dbs.p"
expect_in "[1-9][0-9]* dropped after a failed proof" "$TMP/stripped-bug.1.out"
echo ok
