#!/usr/bin/env bash
# Where the time goes, on the GPU machine (carry .carry/cuda, made here by tools/device/bundle.sh):
#   profile.sh ops [BENCH FLAGS]   every op's GPU time in an eager throughput run
#                  (TROUPE_OP_PROFILE=1, --enforce-eager; default 256 prompts x 1000 in / 256
#                  out: prompt steps of 8,192 tokens, then decode steps of 256 sequences, as in
#                  the 1000 x 1000 run); extra flags go to `troupe bench throughput`.
#                  Output: op_profile.txt (one line per op, weight shape and rows bucket).
#   profile.sh b1  a batch-1 decode token: the scheduler's and executor's host-side split of a
#                  step (graphs and eager), then Nsight Compute's GPU time of every kernel of a
#                  few eager decode steps, summed per kernel (ncu_summary.py). Output: b1_*.log,
#                  ncu_b1.csv and ncu_b1.txt.
#   profile.sh ncu GROUP [KERNEL_REGEX]   Nsight Compute's speed-of-light, memory, occupancy,
#                  warp-state and scheduler sections for the kernels matching KERNEL_REGEX
#                  (default: every kernel; NCU_COUNT launches, default 16) in the op bench's
#                  GROUP (decode, prefill, gemv, sample, dense, ...). Output: ncu_GROUP.txt.
#   profile.sh nsys [BENCH ARGS]   an Nsight Systems timeline of `troupe bench` (default: the
#                  batch-1 latency run), where nsys is installed (not on the PATH of the H200
#                  machines here). Output: troupe.nsys-rep.
source "$(dirname "$0")/env.sh"
unpack_bundle || exit 2
mode=${1:-}
shift || true
case $mode in
  ops)
    TROUPE_OP_PROFILE=1 timeout "${PROFILE_TIMEOUT:-300}" "$root/bin/troupe" --log-level warn \
      bench throughput "${model_args[@]}" --enforce-eager --num-prompts 256 --input-len 1000 \
      --output-len 256 "$@" > "$out/op_profile_run.log" 2>&1
    echo "profile ops: exit $?"
    grep -E "elapsed|output tokens/s|steps" "$out/op_profile_run.log"
    sed -n '/TROUPE_OP_PROFILE/,$p' "$out/op_profile_run.log" > "$out/op_profile.txt"
    head -n 45 "$out/op_profile.txt" ;;
  b1)
    for kind in graphs eager; do
      extra=()
      [[ $kind == eager ]] && extra=(--enforce-eager)
      bench "b1_$kind" 200 "${b1_args[@]}" "${extra[@]}"
      echo "=== batch 1, $kind: $(field "$out/b1_$kind.json" decode_s_per_token 1000) ms per token"
      grep -E "per step|scheduler: .*steps|executor: .*steps|decode-only" "$out/b1_$kind.log"
    done
    ncu=$(find_tool ncu)
    [[ -z $ncu ]] && { echo "profile b1: ncu not found"; exit 2; }
    # 16 output tokens: the profiling step, a prefill and 15 decode steps; skip the first 3000
    # launches (profiling step, prefill, early decode steps) and time the next 1200.
    timeout "${PROFILE_TIMEOUT:-300}" "$ncu" --clock-control none --metrics gpu__time_duration.sum \
      --csv --launch-skip 3000 --launch-count 1200 "$root/bin/troupe" --log-level warn bench \
      latency "${model_args[@]}" --batch-size 1 --enforce-eager --input-len 128 --output-len 16 \
      --num-iters-warmup 0 --num-iters 1 > "$out/ncu_b1.csv" 2> "$out/ncu_b1.err"
    echo "ncu: exit $?"
    python3 "$here/ncu_summary.py" "$out/ncu_b1.csv" | tee "$out/ncu_b1.txt" ;;
  ncu)
    group=${1:?usage: profile.sh ncu GROUP [KERNEL_REGEX]}
    ncu=$(find_tool ncu)
    [[ -z $ncu ]] && { echo "profile ncu: ncu not found"; exit 2; }
    timeout "${PROFILE_TIMEOUT:-300}" "$ncu" --clock-control none --kernel-name regex:"${2:-.}" \
      --launch-count "${NCU_COUNT:-16}" --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
      "$root/bin/troupe_cuda_opbench" 1 "$group" > "$out/ncu_$group.txt" 2>&1
    echo "ncu: exit $?"
    grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Issued Warp|No Eligible|Waves Per SM" \
      "$out/ncu_$group.txt" | head -n 200 ;;
  nsys)
    nsys=$(find_tool nsys)
    [[ -z $nsys ]] && { echo "profile nsys: nsys not found on this machine"; exit 2; }
    args=("$@")
    [[ ${#args[@]} -eq 0 ]] && args=("${b1_args[@]}")
    timeout "${PROFILE_TIMEOUT:-300}" "$nsys" profile --trace cuda,nvtx,osrt --force-overwrite true \
      -o "$out/troupe" "$root/bin/troupe" --log-level warn bench "${args[@]}"
    echo "nsys: exit $?" ;;
  *)
    echo "usage: profile.sh ops [BENCH FLAGS] | b1 | ncu GROUP [KERNEL_REGEX] | nsys [BENCH ARGS]"
    exit 2 ;;
esac
