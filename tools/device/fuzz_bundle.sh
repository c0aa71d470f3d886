#!/usr/bin/env bash
# Packs the six libFuzzer targets (tools/fuzz.sh builds them here, clang 14, ASan + UBSan), the
# shared libraries they load that a stock image may lack, and the corpora grown so far, into
# .carry/fuzz/troupe_fuzz.tar.gz, for tools/device/fuzz.sh on a machine with many cores (the
# device machine's 16 run 16 fuzzing processes per target).
#
# Usage (repository root): tools/device/fuzz_bundle.sh [WORK_DIR, default /tmp/troupe-fuzz]
set -euo pipefail
work=$(realpath -m "${1:-/tmp/troupe-fuzz}")
targets=(openai_request safetensors_header model_config tokenizer_json config_toml generate_input)
for t in "${targets[@]}"; do nice -n 10 tools/fuzz.sh "$t" build "$work"; done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/corpus"
for t in "${targets[@]}"; do
  cp "$work/obj/${t}_fuzz" "$stage/bin/"
  mkdir -p "$stage/corpus/$t"
  [[ -d $work/corpus/$t ]] && cp -r "$work/corpus/$t/." "$stage/corpus/$t/"
done
for bin in "$stage"/bin/*; do ldd "$bin" | awk '/=>/ {print $1, $3}'; done | sort -u |
  while read -r name path; do
    case "$name" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgcc_s.so*) ;;
      *) cp -L "$path" "$stage/lib/$name" ;;
    esac
  done
git rev-parse HEAD > "$stage/commit"
mkdir -p .carry/fuzz
tar -C "$stage" -czf .carry/fuzz/troupe_fuzz.tar.gz bin lib corpus commit
du -h .carry/fuzz/troupe_fuzz.tar.gz
