#!/usr/bin/env bash
# Packs what the transport tests and troupe_transport_bench need on a machine without UCX or
# ucx-utils (the lent GPU machines) into a folder to carry there: the three binaries from a
# build (CUDA on, so the NCCL tests run where a GPU is), UCX's libraries and its cma module,
# ucx_perftest and ucx_info, fmt and numa. NCCL and the CUDA runtime are the machine's own.
# Usage: transport/bench/bundle.sh BUILD_DIR OUT_DIR   (then run OUT_DIR/device_run.sh there)
set -euo pipefail
build=${1:?build dir}
out=${2:?output dir}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/ucx"
cp "$build/tests/troupe_transport_tests" "$build/tests/troupe_transport_peer" \
   "$build/transport/troupe_transport_bench" "$out/bin/"
strip "$out"/bin/troupe_*
cp /usr/bin/ucx_perftest /usr/bin/ucx_info "$out/bin/"
for l in libucp.so.0 libucs.so.0 libuct.so.0 libucm.so.0 libfmt.so.9 libnuma.so.1 libgomp.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$l" "$out/lib/"
done
cp -L /usr/lib/x86_64-linux-gnu/ucx/libuct_cma.so.0 "$out/lib/ucx/"
cp -L /usr/lib/x86_64-linux-gnu/ucx/libuct_cma.so.0 "$out/lib/ucx/libuct_cma.so"
cp "$(dirname "$0")/device_run.sh" "$out/"
# The tests find the peer executable at the path it was built at.
echo "$(cd "$build" && pwd)/tests" > "$out/peer_dir"
du -sh "$out"
