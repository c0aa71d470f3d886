#!/usr/bin/env bash
# Tensor parallelism on two GPUs of one host (issue 23), one device call of about 9 minutes (kind nvidia-h200-x2
# or nvidia-h100-x2, timeout_s 600, carry [".carry/cuda"]; here first: tools/device/bundle.sh):
#   bash tools/device/tp2.sh
#   1. NCCL between two processes on two GPUs against a float64 reference, the same bits on
#      both ranks, and the custom all-reduce over CUDA IPC between them, bit for bit the sum in
#      rank order, eagerly and in graphs, and against NCCL's result (float32 bit for bit, half
#      types within one ulp) (troupe_transport_tests "nccl:*,custom all-reduce:*");
#   2. the transformers fixtures through the engine at TP=2, PP=2 and 2x2 against one rank in
#      float32 (troupe_actors_tests "[parallel]": greedy tokens identical, logprobs within 1e-5);
#   3. Llama-3-8B's shape, bf16, dummy weights: 16 prompts x 256 greedy tokens at TP=2 against
#      TP=1 (the first divergence of each sequence, if any, for a near-tie check);
#   4. batch-1 decode (128 in / 128 out) and 1000 x 1000 throughput at TP=1 and TP=2 (target:
#      TP=2 batch-1 <= 0.6x TP=1 per token), with the executor's split of a step.
#   5. all-reduce latency, bf16, 8 KiB .. 4 MiB between the two GPUs, NCCL and the custom path
#      side by side (troupe_transport_bench --sections nccl: GPU time of one call, median and
#      p90, and back-to-back time per call), and the crossover the engine measured at start
#      (gen.log: "the custom all-reduce takes messages up to ...").
# NVLink multicast stays off (env.sh sets NCCL_NVLS_ENABLE=0; nothing calls cuMulticastCreate).
# Into $OUT: tp2.log, nccl.log, fixtures.log, tp1.jsonl, tp2.jsonl, b1_tp1/2.json, long_tp1/2.json
# and their logs, nccl_allreduce.json. Exit status: non-zero when a test failed.
source "$(dirname "$0")/env.sh"
unpack_bundle || exit 2
export TROUPE_MODEL_FIXTURES="$PWD/tests/fixtures/models"
rc=0
exec > >(tee "$out/tp2.log") 2>&1
start=$(date +%s)
step() { echo "=== $1 ($(( $(date +%s) - start )) s in)"; }
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
nvidia-smi topo -m || true
step "NCCL, two processes on two GPUs"
timeout 150 "$root/bin/troupe_transport_tests" "nccl:*,custom all-reduce:*" > "$out/nccl.log" 2>&1 || rc=1
tail -n 3 "$out/nccl.log"
step "fixtures at TP=2, PP=2, 2x2 against one rank"
timeout 200 "$root/bin/troupe_actors_tests" "[parallel]" > "$out/fixtures.log" 2>&1 || rc=1
tail -n 3 "$out/fixtures.log"
step "Llama-3-8B shape, bf16: TP=2 against TP=1, 16 x 256 greedy tokens"
python3 "$here/split_parity.py" prompts "$out/prompts.jsonl" 11 64 8 256
gen=(generate "${model_args[@]}" --skip-tokenizer-init --input "$out/prompts.jsonl")
timeout 150 "$root/bin/troupe" "${gen[@]}" > "$out/tp1.jsonl" 2> "$out/gen.log" || rc=1
timeout 200 "$root/bin/troupe" --log-level info "${gen[@]}" --tensor-parallel-size 2 \
  > "$out/tp2.jsonl" 2>> "$out/gen.log" || rc=1
python3 "$here/split_parity.py" compare "$out/tp1.jsonl" "$out/tp2.jsonl" "TP=2 against TP=1"
step "batch-1 decode and 1000 x 1000 at TP=1 and TP=2"
for tp in 1 2; do
  bench "b1_tp$tp" 200 "${b1_args[@]}" --tensor-parallel-size "$tp" || rc=1
  echo "b1 TP=$tp: $(field "$out/b1_tp$tp.json" decode_s_per_token 1000) ms/token"
done
for tp in 1 2; do
  bench "long_tp$tp" 280 "${long_args[@]}" --tensor-parallel-size "$tp" || rc=1
  echo "1000x1000 TP=$tp: $(field "$out/long_tp$tp.json" output_tokens_per_s) output tok/s"
  steps "$out/long_tp$tp.log"
done
grep -h "custom all-reduce takes" "$out/gen.log" | head -n 1
step "all-reduce latency, 8 KiB .. 4 MiB, NCCL and the custom path"
timeout 120 "$root/bin/troupe_transport_bench" --sections nccl --no-perftest \
  --out "$out/nccl_allreduce.json" 2> "$out/nccl_bench.log" || rc=1
python3 - "$out/nccl_allreduce.json" <<'EOF' || true
import json, sys
for r in json.load(open(sys.argv[1]))["nccl_allreduce"]:
    print(f"{r['impl']:6s} {r['bytes'] >> 10:5d} KiB: {r['median_us']:7.1f} us median, {r['p90_us']:7.1f} p90, "
          f"{r['pipelined_us']:7.1f} back to back")
EOF
step "done"
rm -f "$out/prompts.jsonl"
exit $rc
