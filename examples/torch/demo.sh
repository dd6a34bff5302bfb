#!/bin/sh
# examples/torch/demo.sh - `make torch-demo`: capture a single-device and a parallel program of
# examples/torch/ with tools/torch2plan, verify the pair with verdict and cross-check with verdict exec.
#
#   sh examples/torch/demo.sh VERDICT [CONFIG ...]     correct configurations (default: all);
#                                                      each must be EQUIVALENT and exec AGREE
#   sh examples/torch/demo.sh VERDICT bug=NAME         one hand-written bug; must be NOT
#                                                      EQUIVALENT and exec DISAGREE
#   sh examples/torch/demo.sh --settings CONFIG|bug=NAME   print "SINGLE PARALLEL NPROC SETTING..."
#                                                      (the programs, --nproc and the --set values)
#   sh examples/torch/demo.sh --list                   the configurations and the bugs
# Plans and reports land in ${OUT:-build/torch}.  Exit 0 when every run ends as expected.
set -u
VERDICT=${1:?usage: demo.sh VERDICT [CONFIG ...|bug=NAME]}
shift
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/build/torch}
EX=$ROOT/examples/torch
LLAMA="llama_single.py llama_parallel.py"
GPT2_DDP="gpt2_single.py gpt2_ddp.py"
VOCAB="vocab_single.py vocab_tp.py"

# One row per configuration: name -> "single parallel nproc settings" (programs in examples/torch/).
CONFIGS="tp2 pp2 dp2 sp tp2pp2dp2 tp2pp2dp2sp tied gpt2_ddp gpt2_ddp_buckets gpt2_ddp_accum gpt2_mcore gpt2_pipe gpt2_pipe_1f1b gpt2_dtensor gpt2_dtensor_sp gpt2_dtensor_2d gpt2_dtensor_fsdp gpt2_fsdp gpt2_fsdp_adamw gpt2_fsdp_ckpt gpt2_fsdp_mp gpt2_fsdp_offload gpt2_hsdp gpt2_fsdp1 gpt2_fsdp1_adamw gpt2_fsdp1_accum gpt2_zero vocab_tp2dp2 vocab_ce_tp2 vocab_mcore seqcls_ddp"
conf() {
  case $1 in
    tp2) echo "$LLAMA 2 tp=2" ;;
    pp2) echo "$LLAMA 2 pp=2 nm=2" ;;
    dp2) echo "$LLAMA 2 dp=2 opt=adam" ;;
    sp) echo "$LLAMA 2 tp=2 sp=1" ;;
    tp2pp2dp2) echo "$LLAMA 8 tp=2 pp=2 dp=2 nm=2 opt=adam" ;;
    tp2pp2dp2sp) echo "$LLAMA 8 tp=2 pp=2 dp=2 nm=2 sp=1 bucket=1" ;;
    tied) echo "$LLAMA 8 tp=2 pp=2 dp=2 nm=2 tie=1" ;;
    gpt2_ddp) echo "$GPT2_DDP 2 dp=2 opt=adamw" ;;
    gpt2_ddp_buckets) echo "$GPT2_DDP 2 dp=2 attn=sdpa opt=adamw bucket_mb=0.002" ;;
    gpt2_ddp_accum) echo "$GPT2_DDP 2 dp=2 accum=2" ;;
    gpt2_mcore) echo "gpt2_single.py gpt2_mcore.py 2 tp=2" ;;
    gpt2_pipe) echo "gpt2_single.py gpt2_pipe.py 2 schedule=gpipe nm=2" ;;
    gpt2_pipe_1f1b) echo "gpt2_single.py gpt2_pipe.py 2 schedule=1f1b nm=4" ;;
    gpt2_dtensor) echo "gpt2_single.py gpt2_dtensor.py 2 tp=2" ;;
    gpt2_dtensor_sp) echo "gpt2_single.py gpt2_dtensor.py 2 tp=2 sp=1" ;;
    gpt2_dtensor_2d) echo "gpt2_single.py gpt2_dtensor.py 4 tp=2" ;;
    gpt2_dtensor_fsdp) echo "gpt2_single.py gpt2_dtensor.py 4 tp=2 fsdp=1" ;;
    gpt2_fsdp) echo "gpt2_single.py gpt2_fsdp.py 2 dp=2 opt=sgdm" ;;
    gpt2_fsdp_adamw) echo "gpt2_single.py gpt2_fsdp.py 2 dp=2 opt=adamw clip=0.5" ;;
    gpt2_fsdp_ckpt) echo "gpt2_single.py gpt2_fsdp.py 2 dp=2 opt=adamw ckpt=1" ;;
    gpt2_fsdp_mp) echo "gpt2_single.py gpt2_fsdp.py 2 dp=2 opt=adamw mp=bf16 rd=f32" ;;
    gpt2_fsdp_offload) echo "gpt2_single.py gpt2_fsdp.py 2 dp=2 opt=adamw offload=1" ;;
    gpt2_hsdp) echo "gpt2_single.py gpt2_fsdp.py 4 dp=4 hsdp=2" ;;
    gpt2_fsdp1) echo "gpt2_single.py gpt2_fsdp1.py 2 dp=2" ;;
    gpt2_fsdp1_adamw) echo "gpt2_single.py gpt2_fsdp1.py 2 dp=2 opt=adamw clip=0.5 dtype=f32" ;;
    gpt2_fsdp1_accum) echo "gpt2_single.py gpt2_fsdp1.py 2 dp=2 accum=2" ;;
    gpt2_zero) echo "gpt2_single.py gpt2_zero.py 2 dp=2 opt=adamw" ;;
    vocab_tp2dp2) echo "$VOCAB 4 tp=2 dp=2" ;;
    vocab_ce_tp2) echo "$VOCAB 2 tp=2 ce=vocab" ;;
    vocab_mcore) echo "vocab_single.py vocab_mcore.py 2 tp=2" ;;
    seqcls_ddp) echo "seqcls.py seqcls_ddp.py 2" ;;
    *) echo "" ;;
  esac
}
# One row per bug: bug -> the configuration it is demonstrated on.
BUGS="no_allreduce grad_scale pp_recv dp_noavg no_sp_gather tie_noreduce loss_scale ignored accum_nodiv no_bias_rowwise noscale drop_mb no_reduce placement sum_rs flat_sum no_rep_reduce stale vocab_shard head_noavg sync_first"
bugconf() {
  case $1 in
    no_allreduce|dp_noavg) echo tp2pp2dp2 ;;
    grad_scale|pp_recv|no_sp_gather) echo tp2pp2dp2sp ;;
    tie_noreduce) echo tied ;;
    loss_scale|ignored) echo gpt2_ddp ;;
    accum_nodiv) echo gpt2_ddp_accum ;;
    no_bias_rowwise) echo gpt2_mcore ;;
    noscale) echo gpt2_pipe ;;
    drop_mb) echo gpt2_pipe_1f1b ;;
    no_reduce) echo gpt2_dtensor ;;
    placement) echo gpt2_dtensor_sp ;;
    sum_rs) echo gpt2_fsdp ;;
    flat_sum) echo gpt2_fsdp1 ;;
    no_rep_reduce) echo gpt2_hsdp ;;
    stale) echo gpt2_zero ;;
    vocab_shard) echo vocab_tp2dp2 ;;
    head_noavg|sync_first) echo seqcls_ddp ;;
    *) echo "" ;;
  esac
}

if [ "$VERDICT" = --list ]; then
  echo "configurations: $CONFIGS"
  echo "bugs: $BUGS"
  exit 0
fi

# demo.sh --settings CONFIG|bug=NAME: print "NPROC SETTING..." for tools/torch2plan's --nproc and
# --set (examples/ci/verify.sh captures the same configurations); exit 2 when unknown.
if [ "$VERDICT" = --settings ]; then
  t=${1:-}
  case $t in
    bug=*) c=$(bugconf "${t#bug=}"); [ -n "$c" ] && s=$(conf "$c") && [ -n "$s" ] && echo "$s bug=${t#bug=}" && exit 0 ;;
    *) s=$(conf "$t"); [ -n "$s" ] && echo "$s" && exit 0 ;;
  esac
  echo "demo.sh: unknown configuration '$t'" >&2
  exit 2
fi

mkdir -p "$OUT"
now() { date +%s.%N; }

# run NAME CONFIG EXPECT(0 equivalent|1 not) [bug]
run() {
  name=$1; c=$(conf "$2"); want=$3; bug=${4:-}
  set -- $c
  single=$1; parallel=$2; np=$3; shift 3
  sets=""
  for s in "$@"; do sets="$sets --set $s"; done
  [ -n "$bug" ] && sets="$sets --set bug=$bug"
  t0=$(now)
  if ! /usr/bin/python3 "$ROOT/tools/torch2plan" --single "$EX/$single" --parallel "$EX/$parallel" \
      --nproc "$np" $sets --out-single "$OUT/$name.single.plan" --out-parallel "$OUT/$name.parallel.plan" \
      >"$OUT/$name.capture.log" 2>&1; then
    cat "$OUT/$name.capture.log"
    echo "$name: capture failed"
    return 1
  fi
  t1=$(now)
  "$VERDICT" --sm "$OUT/$name.single.plan" --pm "$OUT/$name.parallel.plan" --json "$OUT/$name.json" \
    >"$OUT/$name.report" 2>"$OUT/$name.stderr"   # stderr: progress lines and errors
  vrc=$?
  t2=$(now)
  "$VERDICT" exec --sm "$OUT/$name.single.plan" --pm "$OUT/$name.parallel.plan" -q >"$OUT/$name.exec" 2>&1
  erc=$?
  printf '%s (%s): %s; %s; capture %.1f s, verify %.1f s\n' "$name" "$c" "$(head -1 "$OUT/$name.report")" \
    "$(head -1 "$OUT/$name.exec")" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"
  if [ "$want" = 1 ]; then
    # the diagnosis and the Python line of the first diverging operator
    grep -E "^== |first diverging|inference stopped first" "$OUT/$name.report" | head -4 | cut -c1-400 | sed 's/^/    /'
  fi
  [ "$vrc" = "$want" ] && [ "$erc" = "$want" ]
}

fail=0
if [ $# -ge 1 ] && [ "${1#bug=}" != "$1" ]; then
  bug=${1#bug=}
  c=$(bugconf "$bug")
  [ -n "$c" ] || { echo "demo.sh: unknown bug '$bug' ($BUGS)"; exit 2; }
  run "bug_$bug" "$c" 1 "$bug" || fail=1
else
  configs=${*:-$CONFIGS}
  for c in $configs; do
    [ -n "$(conf "$c")" ] || { echo "demo.sh: unknown configuration '$c'"; exit 2; }
    run "$c" "$c" 0 || fail=1
  done
fi
exit $fail
