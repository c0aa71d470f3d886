#!/usr/bin/env bash
# Fuzzes the OpenAI request parser (tests/fuzz/openai_request_fuzz.cpp) with libFuzzer under
# AddressSanitizer and UndefinedBehaviorSanitizer, starting from the seed corpus; new inputs
# collect in a copy of it, a crashing input lands in the work dir. Not part of CI.
# Needs clang (Debian: clang) and builds only the parser's own sources (runtime/openai and what
# it calls), so the rest of the tree need not compile with clang. About 2 minutes to build on
# 2 cores.
# Usage (repo root): tools/fuzz_openai.sh [seconds, default 60] [work dir, default /tmp/fuzz-openai]
set -euo pipefail
seconds=${1:-60}
dir=${2:-/tmp/fuzz-openai}
mkdir -p "$dir/corpus"
sources=(tests/fuzz/openai_request_fuzz.cpp runtime/openai/protocol.cpp runtime/openai/api_error.cpp
         runtime/config/sampling_params.cpp runtime/config/field_codec.cpp
         runtime/checkpoint/generation_config.cpp)
clang++ -std=c++20 -O1 -g -fno-omit-frame-pointer -I. -DTROUPE_LIBFUZZER=1 -DFMT_SHARED \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  "${sources[@]}" -lfmt -o "$dir/fuzz_openai_request"
cp -n tests/fuzz/corpus/openai_request/* "$dir/corpus/"
cd "$dir"
./fuzz_openai_request -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 corpus
