#!/usr/bin/env bash
# Runs libFuzzer targets on every core of the machine, from the bundle of
# tools/device/fuzz_bundle.sh (carry .carry/fuzz): for each TARGET, one fuzzing process per core
# (-jobs = -workers = cores), each for RUNS / cores inputs (or SECONDS), from the committed seeds
# and the carried corpus, so the target runs RUNS inputs in all. Into $OUT: fuzz.log (per
# target: inputs run, the sum of the jobs' final stats, exec/s, seconds, coverage, crashes),
# TARGET-*.log of any job that failed and every crashing input (TARGET-crash-*, -timeout-*,
# -oom-*). Exit status: non-zero when a target found something.
#
# Usage (repository root, on the device machine):
#   bash tools/device/fuzz.sh RUNS|SECONDSs TARGET...
set -uo pipefail
amount=${1:?usage: fuzz.sh RUNS|SECONDSs TARGET...}
shift
out=${OUT:-/tmp/troupe_fuzz_out}
mkdir -p "$out"
bundle=.carry/fuzz/troupe_fuzz.tar.gz
root=/tmp/troupe_fuzz
[[ -f $bundle ]] || { echo "$bundle is missing: run tools/device/fuzz_bundle.sh and carry .carry/fuzz" >&2; exit 2; }
rm -rf "$root" && mkdir -p "$root" && tar -C "$root" -xzf "$bundle" || exit 2
export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
seeds=$PWD/tests/fuzz/corpus
cores=$(nproc)
rc=0
exec > >(tee "$out/fuzz.log") 2>&1
echo "fuzz: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), commit $(cat "$root/commit")"
for t in "$@"; do
  work=$root/run/$t
  mkdir -p "$work"
  case "$amount" in
    *s) limit=(-max_total_time="${amount%s}") ;;
    *) limit=(-runs=$(( (amount + cores - 1) / cores ))) ;;
  esac
  start=$(date +%s%N)
  # A hang is a stall past 10 s on an otherwise idle core; each job has its own log.
  (cd "$work" && "$root/bin/${t}_fuzz" -jobs="$cores" -workers="$cores" "${limit[@]}" \
     -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -print_funcs=0 \
     -artifact_prefix="$out/$t-" "$root/corpus/$t" "$seeds/$t" > "$work/driver.log" 2>&1)
  secs=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN {print (b - a) / 1e9}')
  runs=$(cat "$work"/fuzz-*.log | awk '/stat::number_of_executed_units/ {s += $2} END {print s + 0}')
  jobs_done=$(cat "$work"/fuzz-*.log | grep -c 'stat::number_of_executed_units')
  cov=$(cat "$work"/fuzz-*.log | grep -o 'cov: [0-9]*' | awk '{if ($2 > m) m = $2} END {print m + 0}')
  found=$(ls "$out/$t-"* 2>/dev/null | wc -l)
  printf '%s: %d inputs in %.0f s (%d jobs of %d reported), %.0f exec/s, max cov %d, %d found\n' \
    "$t" "$runs" "$secs" "$jobs_done" "$cores" "$(awk -v r="$runs" -v s="$secs" 'BEGIN {print r / s}')" "$cov" "$found"
  if (( found > 0 || jobs_done < cores )); then
    rc=1
    for f in "$work"/fuzz-*.log; do
      grep -q 'stat::number_of_executed_units' "$f" || cp "$f" "$out/$t-$(basename "$f")"
    done
    grep -l 'ERROR\|SUMMARY' "$work"/fuzz-*.log 2>/dev/null | head -n 2 |
      while read -r f; do cp "$f" "$out/$t-$(basename "$f")"; done
  fi
done
exit $rc
