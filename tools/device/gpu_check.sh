#!/usr/bin/env bash
# One GPU-machine call that checks troupe end to end on CUDA, with .carry/cuda carried
# (tools/device/bundle_cuda_tests.sh makes it here):
#   1. run_cuda_tests.sh: the CUDA op tests, model parity vs transformers, the op bench;
#   2. the actor pipeline on CUDA: troupe_actors_tests (device auto picks the GPU), then
#      `troupe generate` on the embedded model.
# The binaries were built with this checkout at /work/main; the script links that path here.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
mkdir -p "$out"
repo=$(pwd)
if [[ ! -e /work/main ]]; then mkdir -p /work && ln -s "$repo" /work/main; fi
export TROUPE_MODEL_FIXTURES="$repo/tests/fixtures/models"
bash tools/device/run_cuda_tests.sh "${1:-full}"
rc=$?
source "$(dirname "$0")/env.sh"  # root, cublas, LD_LIBRARY_PATH
mkdir -p build/tools && cp "$root/bin/troupe" build/tools/troupe
echo "=== actor pipeline on CUDA ===" | tee "$out/actors.log"
# The dictionary-words test needs Debian's /usr/share/dict/words (wamerican), which the GPU
# machine lacks; CI runs it. Everything else runs here on the GPU.
dict_test="troupe-fortunes writes mostly dictionary words"
filter=()
[[ -r /usr/share/dict/words ]] || filter=("~$dict_test")
"$root/bin/troupe_actors_tests" --durations yes "${filter[@]}" 2>&1 | tail -n 60 | tee -a "$out/actors.log"
arc=${PIPESTATUS[0]}
echo "=== troupe generate on CUDA ===" | tee "$out/generate.log"
build/tools/troupe generate --max-tokens 48 --seed 0 "The future of AI is" "Once upon a time" \
  "A wise man" 2>&1 | tee -a "$out/generate.log"
grc=${PIPESTATUS[0]}
echo "gpu_check: cuda tests $rc, actors $arc, generate $grc"
exit $(( rc || arc || grc ))
