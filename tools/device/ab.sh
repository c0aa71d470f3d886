#!/usr/bin/env bash
# An A/B of two builds on one GPU machine, so a difference between builds is not one between
# machines (H200s of one kind differ by 2-5%). Here first: tools/device/bundle.sh --ab COMMIT
# (the current tree plus COMMIT's troupe); carry .carry/cuda.
#   ab.sh [BENCH ...]   (default: latency long), each BENCH one of
#     latency   batch-1 decode, 128 in / 128 out: ms per output token
#     long      1000 prompts x 1000 in / 1000 out: output tok/s, prompt and decode step times
# First the ceilings (ceilings.py), then ROUNDS rounds (default 2) of each BENCH with COMMIT's
# build and then the current one, alternating; AB_FLAGS (e.g. "--max-num-seqs 512") go to
# every run of both. JSON and logs in $OUT as BENCH_old_N / BENCH_new_N; one line per run.
# About 4 minutes a round of latency + long on an H200.
source "$(dirname "$0")/env.sh"
unpack_bundle || exit 2
if [[ ! -f .carry/cuda/troupe_old.gz ]]; then
  echo "ab.sh: .carry/cuda/troupe_old.gz is missing: run tools/device/bundle.sh --ab COMMIT here"
  exit 2
fi
gunzip -c .carry/cuda/troupe_old.gz > "$root/bin/troupe_old" && chmod +x "$root/bin/troupe_old"
echo "old build: $(cat .carry/cuda/troupe_old.commit 2>/dev/null || echo unknown); new build: this tree"
benches=("$@")
[[ ${#benches[@]} -eq 0 ]] && benches=(latency long)
read -ra flags <<< "${AB_FLAGS:-}"
timeout 120 python3 "$here/ceilings.py" --output-json "$out/ceilings.json"
for round in $(seq 1 "${ROUNDS:-2}"); do
  for b in "${benches[@]}"; do
    for build in old new; do
      bin=troupe
      [[ $build == old ]] && bin=troupe_old
      name="${b}_${build}_$round"
      case $b in
        latency)
          BENCH_BIN=$bin bench "$name" 150 "${b1_args[@]}" "${flags[@]}"
          echo "$name: $(field "$out/$name.json" decode_s_per_token 1000) ms per output token" ;;
        long)
          BENCH_BIN=$bin bench "$name" 300 "${long_args[@]}" "${flags[@]}"
          echo "$name: $(field "$out/$name.json" output_tokens_per_s) output tok/s," \
            "$(field "$out/$name.json" elapsed_s) s"
          steps "$out/$name.log" | grep -E "steps with prompt|decode-only" | sed 's/^/    /' ;;
        *)
          echo "ab.sh: bench '$b': allowed: latency, long"
          exit 2 ;;
      esac
    done
  done
done
