# Sourced by the GPU-machine scripts of tools/device (not run by itself). After sourcing:
#   out      $OUT (the device tool's folder that comes back) or /tmp/troupe_cuda_out, created
#   here     this folder
#   root     where unpack_bundle puts the bundle (bin/ and lib/)
#   cublas   the folder of the machine's own libcublasLt.so.13 (the bundle leaves it out,
#            ~500 MB), already on LD_LIBRARY_PATH with the bundle's lib/
#   model_args, long_args, b1_args   `troupe bench` arguments of the benchmark model and runs
# and the functions below. Every script runs from the repository root, with .carry/cuda
# (tools/device/bundle.sh) carried along.
set -uo pipefail
out=${OUT:-/tmp/troupe_cuda_out}
mkdir -p "$out"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=/tmp/troupe_cuda
bundle=.carry/cuda/troupe_cuda.tar.gz

cublas=""
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/lib/x86_64-linux-gnu; do
  if [[ -e $dir/libcublasLt.so.13 ]]; then cublas=$dir; break; fi
done
if [[ -z $cublas ]]; then
  found=$(find /usr/local/cuda* /usr /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -n 1)
  [[ -n $found ]] && cublas=$(dirname "$found")
fi
# NCCL (2.x keeps its ABI): the system's, else the one PyTorch's wheels bring.
nccl=""
found=$(find /usr/lib/x86_64-linux-gnu /usr/local/cuda*/lib* /usr/local/lib /opt -maxdepth 4 \
  -name 'libnccl.so.2*' 2>/dev/null | head -n 1)
[[ -z $found ]] && found=$(find / -xdev -path '*nvidia/nccl/lib/libnccl.so.2' 2>/dev/null | head -n 1)
[[ -n $found ]] && nccl=$(dirname "$found")
export LD_LIBRARY_PATH="$root/lib${cublas:+:$cublas}${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on the lent machines (KINDS.md)

# The benchmark model: Llama-3-8B's shape with dummy bf16 weights (16.06 GB), and the runs of
# docs/benchmarks.md: batch-1 decode at 128 in / 128 out, and 1000 prompts x 1000 in / 1000 out.
model_args=(--model configs/models/llama-3-8b --load-format dummy --dtype bfloat16
            --max-model-len 4096)
b1_args=(latency "${model_args[@]}" --async-scheduling --batch-size 1 --input-len 128
         --output-len 128 --num-iters-warmup 1 --num-iters 3)
long_args=(throughput "${model_args[@]}" --async-scheduling --num-prompts 1000 --input-len 1000
           --output-len 1000)

# unpack_bundle: the bundle unpacked into $root (again only when it changed); fails, saying
# so, when it was not carried. Also makes the paths the test binaries were built with (the
# source and build folders bundle.sh recorded) lead to this checkout, for their fixtures and
# `troupe worker`.
unpack_bundle() {
  if [[ ! -f $bundle ]]; then
    echo "$bundle is missing: run tools/device/bundle.sh here and carry .carry/cuda" >&2
    return 2
  fi
  local stamp
  stamp=$(stat -c '%s %Y' "$bundle")
  if [[ ! -f $root/stamp || $(cat "$root/stamp") != "$stamp" ]]; then
    rm -rf "$root" && mkdir -p "$root" && tar -C "$root" -xzf "$bundle" || return 2
    echo "$stamp" > "$root/stamp"
  fi
  local src build
  src=$(sed -n 1p "$root/paths" 2>/dev/null)
  build=$(sed -n 2p "$root/paths" 2>/dev/null)
  if [[ -n $src && $src != "$PWD" && ! -e $src ]]; then
    mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"
  fi
  if [[ -n $build && ! -x $build/tools/troupe ]]; then
    mkdir -p "$build/tools" && cp "$root/bin/troupe" "$build/tools/troupe"
  fi
  # The transport tests start their rank processes from the path they were built with (copied
  # again when the bundle brings another one: a warm machine keeps the last call's).
  if [[ -n $build && -x $root/bin/troupe_transport_peer ]] &&
     ! cmp -s "$root/bin/troupe_transport_peer" "$build/tests/troupe_transport_peer"; then
    mkdir -p "$build/tests" && cp -f "$root/bin/troupe_transport_peer" "$build/tests/"
  fi
  # The example plug-in the logits-processor tests load from the build folder.
  local plugin=libtroupe_no_repeat_ngram.so
  if [[ -n $build && -f $root/bin/$plugin ]] && ! cmp -s "$root/bin/$plugin" "$build/examples/$plugin"; then
    mkdir -p "$build/examples" && cp -f "$root/bin/$plugin" "$build/examples/"
  fi
  return 0
}

# bench NAME SECONDS ARGS...: `troupe bench ARGS` with the bundle's troupe, SECONDS at most,
# its log in $out/NAME.log and its results in $out/NAME.json; BENCH_BIN picks another binary
# of $root/bin (ab.sh's old build).
bench() {
  local name=$1 secs=$2
  shift 2
  timeout "$secs" "$root/bin/${BENCH_BIN:-troupe}" --log-level info bench "$@" \
    --output-json "$out/$name.json" > "$out/$name.log" 2>&1
}

# field FILE KEY [SCALE]: a number from a bench JSON, times SCALE, or n/a.
field() {
  python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))[sys.argv[2]] * float(sys.argv[3]), 3))" \
    "$1" "$2" "${3:-1}" 2>/dev/null || echo n/a
}

# steps FILE: the bench log's split of the run (prompt steps, decode-only steps, the executor).
steps() {
  grep -E "elapsed|output tokens/s|model TFLOP/s|decode time per output|steps with prompt|decode-only" \
    "$1" | sed 's/^ *//'
}

# smi_start LOG samples nvidia-smi every 200 ms into LOG until smi_stop LABEL, which prints
# smi_summary.py's line: SM clock, power and the active clock-event reasons (a power-capped
# run shows "sw power cap"), which tell a slow kernel from a slow clock.
smi_start() {
  smi_log=$1
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader,nounits -lms 200 > "$smi_log" 2>&1 &
  smi_pid=$!
}
smi_stop() {
  kill "$smi_pid" 2>/dev/null
  wait "$smi_pid" 2>/dev/null
  python3 "$here/smi_summary.py" "$smi_log" "$1"
}

# find_tool NAME: the path of an NVIDIA tool (ncu, nsys, compute-sanitizer), or nothing.
find_tool() {
  command -v "$1" 2>/dev/null ||
    ls /usr/local/cuda*/bin/"$1" /opt/nvidia/nsight-compute/*/"$1" \
       /opt/nvidia/nsight-compute/*/host/target-linux-x64/"$1" 2>/dev/null | head -n 1
}
