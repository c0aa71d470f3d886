#!/usr/bin/env bash
# Fuzzes one of troupe's input parsers with libFuzzer under AddressSanitizer and
# UndefinedBehaviorSanitizer (clang, Debian: clang), starting from its seed corpus. Not part of
# CI, which replays the same targets over their corpora (tests/fuzz/CMakeLists.txt). What each
# target feeds and the runs done so far: docs/fuzzing.md.
#
# Usage (repo root): tools/fuzz.sh TARGET [RUNS | SECONDSs] [WORK_DIR] [LIBFUZZER_FLAG...]
#   TARGET     a tests/fuzz/TARGET_fuzz.cpp: openai_request, safetensors_header, model_config,
#              tokenizer_json, config_toml, generate_input
#   RUNS       inputs to run (10000000), or SECONDS followed by s (600s); default 60s; `build`
#              builds the target and stops (tools/device/fuzz_bundle.sh packs them for a
#              many-core machine: tools/device/fuzz.sh)
#   WORK_DIR   default /tmp/troupe-fuzz: runtime/ compiled once with the sanitizers and
#              coverage (objects and libruntime.a, rebuilt when a source or header changes;
#              about 10 minutes on 2 cores the first time), the target's binary, the inputs it
#              finds (corpus/TARGET; the committed seeds are read, never written) and any
#              crashing input (TARGET-crash-*, TARGET-oom-*, TARGET-timeout-*).
#   LIBFUZZER_FLAG  passed on, e.g. -max_total_time=2400 with RUNS: whichever comes first.
# A crash is replayed with WORK_DIR/obj/TARGET_fuzz FILE (or the CTest replay: add FILE to the
# corpus, fix, commit both).
# On a shared machine: nice -n 19 tools/fuzz.sh ...; FUZZ_JOBS (default 2) compile jobs.
set -euo pipefail
target=${1:?usage: tools/fuzz.sh TARGET [RUNS | SECONDSs] [WORK_DIR] [LIBFUZZER_FLAG...]}
amount=${2:-60s}
work=$(realpath -m "${3:-/tmp/troupe-fuzz}")
shift $(($# < 3 ? $# : 3))
root=$(pwd)
src="$root/tests/fuzz/${target}_fuzz.cpp"
[ -f "$src" ] || { echo "fuzz.sh: no $src" >&2; exit 2; }
case "$amount" in
  *s) limit=(-max_total_time="${amount%s}") ;;
  *) limit=(-runs="$amount") ;;
esac

mkdir -p "$work/obj" "$work/corpus/$target"
# toml++ is Debian's shared library, as troupe links it, so not instrumented: compiled from
# its 3.3.0 headers with the sanitizers it stops on two known bugs of its own that the release
# build handles (an assert in parse_key, marzer/tomlplusplus#301; an unreachable branch for
# U+00A1..U+0499, #295), which tests/runtime/test_config_toml.cpp pins.
cat > "$work/obj/Makefile.new" <<EOF
ROOT := $root
CXXFLAGS := -std=c++20 -O1 -g -fno-omit-frame-pointer -I\$(ROOT) -DTOML_HEADER_ONLY=0 \
  -DTOML_SHARED_LIB=1 -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL \
  -fno-sanitize-recover=undefined -MMD -MP
SRCS := \$(shell cd \$(ROOT) && find runtime -name '*.cpp' | sort)
OBJS := \$(SRCS:.cpp=.o)
LIBS := -ltomlplusplus -lspdlog -lfmt -lonig -lutf8proc -ldl -pthread

libruntime.a: \$(OBJS)
	rm -f \$@ && ar rcs \$@ \$^

runtime/%.o: \$(ROOT)/runtime/%.cpp Makefile
	@mkdir -p \$(@D)
	clang++ \$(CXXFLAGS) -fsanitize=fuzzer-no-link,address,undefined -c \$< -o \$@

%_fuzz: \$(ROOT)/tests/fuzz/%_fuzz.cpp libruntime.a Makefile
	clang++ \$(CXXFLAGS) -fsanitize=fuzzer,address,undefined \$< libruntime.a \$(LIBS) -o \$@

-include \$(OBJS:.o=.d) \$(wildcard *_fuzz.d)
EOF
# Replaced only when it changed: a new Makefile (other flags) rebuilds everything.
cmp -s "$work/obj/Makefile.new" "$work/obj/Makefile" || mv "$work/obj/Makefile.new" "$work/obj/Makefile"
make -s -C "$work/obj" -j"${FUZZ_JOBS:-2}" "${target}_fuzz"
[[ $amount == build ]] && exit 0

# New inputs go to the first directory; the committed seeds are only read.
cd "$work"
exec "$work/obj/${target}_fuzz" "${limit[@]}" -timeout=10 -print_final_stats=1 -print_funcs=0 \
  -artifact_prefix="$work/$target-" "$@" "corpus/$target" "$root/tests/fuzz/corpus/$target"
