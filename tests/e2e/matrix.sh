# The generators' matrix of configurations, sourced by tests/e2e/10_verify_matrix.sh (each
# verified EQUIVALENT, the executor agreeing) and bench/strip_matrix.sh (each verified with
# every lineage and stripped to its boundary).  Not a test itself.
SIZES="--layers 2 --hidden 32 --heads 4 --seq 8 --batch 4"
# for_each_config FN: calls FN with the `verdict gen` arguments of every configuration, in order
for_each_config() {
  for model in mlp llama3 moe; do
    for dp in 1 2; do for tp in 1 2; do for pp in 1 2; do for nm in 1 2; do
      $1 --model $model $SIZES --dp $dp --tp $tp --pp $pp --nm $nm
    done; done; done; done
  done
  $1 --model llama3 $SIZES --tp 4
  $1 --model llama3 $SIZES --pp 4 --layers 4 --nm 2
  $1 --model llama3 $SIZES --dp 4
  $1 --model llama3 $SIZES --tp 2 --sp
  $1 --model llama3 $SIZES --tp 2 --sp --pp 2 --nm 2
  $1 --model llama3 $SIZES --cp 2
  $1 --model llama3 $SIZES --cp 2 --tp 2
  $1 --model moe $SIZES --ep 2
  $1 --model moe $SIZES --ep 2 --tp 2
  $1 --model llama3 $SIZES --dp 2 --zero 1 --optimizer adam
  $1 --model moe $SIZES --dp 2 --zero 1 --optimizer adam
  $1 --model llama3 $SIZES --dp 2 --tp 2 --grad-clip 1.0 --loss sum
  $1 --model llama3 $SIZES --heads 4 --kv-heads 2 --tp 2
  # tied embeddings (one weight for the embedding and the LM head; pp > 1: a
  # copy per end stage, gradients all-reduced across them) and the masked loss
  # (global token count all-reduced over dp replicas and cp ranks)
  $1 --model llama3 $SIZES --dp 2 --tp 2 --nm 2 --tie-embeddings
  $1 --model llama3 $SIZES --dp 2 --tp 2 --pp 2 --nm 2 --tie-embeddings
  $1 --model llama3 $SIZES --dp 2 --tp 2 --pp 2 --nm 2 --loss-mask
  $1 --model llama3 $SIZES --cp 2 --loss-mask
}
