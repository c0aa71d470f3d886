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
