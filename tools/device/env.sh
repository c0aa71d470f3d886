# Sourced by the GPU-machine scripts: where run_cuda_tests.sh unpacks the bundle ($root), and
# LD_LIBRARY_PATH with the bundle's libraries plus the machine's own cuBLASLt ($cublas; the
# bundle leaves it out, ~500 MB).
root=/tmp/troupe_cuda
cublas=""
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/lib/x86_64-linux-gnu; do
  if [[ -e $dir/libcublasLt.so.13 ]]; then cublas=$dir; break; fi
done
if [[ -z $cublas ]]; then
  found=$(find /usr/local/cuda* /usr /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -n 1)
  [[ -n $found ]] && cublas=$(dirname "$found")
fi
export LD_LIBRARY_PATH="$root/lib${cublas:+:$cublas}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# The Llama-3-8B benchmark model and the issue's 1000 prompts x 1000 in / 1000 out throughput
# run, as `troupe bench` arguments (bench_long.sh, long_variants.sh).
model_args=(--model configs/models/llama-3-8b --load-format dummy --dtype bfloat16
            --max-model-len 4096)
long_args=(throughput "${model_args[@]}" --num-prompts 1000 --input-len 1000 --output-len 1000)

# split_variant "WORDS": a variant of the A/B scripts (variants.sh, long_variants.sh) into
# envs (the NAME=VALUE words) and flags (every other word, e.g. "--max-num-seqs 440");
# "default" gives neither.
split_variant() {
  local words=() w
  envs=(); flags=()
  [[ $1 != default ]] && read -ra words <<< "$1"
  for w in "${words[@]}"; do
    if [[ $w != -* && $w == *=* ]]; then envs+=("$w"); else flags+=("$w"); fi
  done
}

# long_run BIN VARIANT JSON: the 1000 x 1000 run (--async-scheduling) with $root/bin/BIN and
# VARIANT's knobs and flags (split_variant), its log on stdout, its results in JSON;
# LONG_TIMEOUT seconds at most (default 280).
long_run() {
  split_variant "$2"
  env "${envs[@]}" timeout "${LONG_TIMEOUT:-280}" "$root/bin/$1" --log-level info bench \
    "${long_args[@]}" --async-scheduling "${flags[@]}" --output-json "$3" 2>&1
}

# field FILE KEY [SCALE]: a number from a bench JSON, times SCALE, or n/a.
field() {
  python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))[sys.argv[2]] * float(sys.argv[3]), 3))" \
    "$1" "$2" "${3:-1}" 2>/dev/null || echo n/a
}

# session_tests OUT: the CUDA test cases (run_cuda_tests.sh, which unpacks the bundle into
# $root), logged to OUT/tests.txt, with their exit status and summary printed: the first step
# of every session script.
session_tests() {
  OUT=$1 bash "$(dirname "${BASH_SOURCE[0]}")/run_cuda_tests.sh" tests > "$1/tests.txt" 2>&1
  echo "tests: exit $?"
  grep -E "test cases|assertions|FAILED" "$1/tests.txt" | tail -n 5
}

# unpack_bundle: .carry/cuda/troupe_cuda.tar.gz (bundle_cuda_tests.sh) unpacked into $root;
# fails, saying so, when the bundle was not carried.
unpack_bundle() {
  local bundle=.carry/cuda/troupe_cuda.tar.gz
  if [[ ! -f $bundle ]]; then
    echo "$bundle is missing: run tools/device/bundle_cuda_tests.sh here and carry .carry/cuda"
    return 2
  fi
  rm -rf "$root" && mkdir -p "$root" && tar -C "$root" -xzf "$bundle"
}

# session_init [unpack]: the start of a session script after it sourced this file: `out`
# ($OUT or /tmp/troupe_cuda_out, created) and `here` (this folder); with "unpack", the bundle
# (.carry/cuda/troupe_cuda.tar.gz) unpacked into $root, for scripts that skip session_tests.
session_init() {
  set -uo pipefail
  out=${OUT:-/tmp/troupe_cuda_out}
  mkdir -p "$out"
  here=$(dirname "${BASH_SOURCE[0]}")
  if [[ ${1:-} == unpack ]]; then unpack_bundle; fi
}
