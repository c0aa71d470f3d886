#!/usr/bin/env bash
# Run on the GPU machine (it has torch + transformers): writes the model-parity fixtures,
# trains the embedded default model and measures the two hardware ceilings, all into $OUT.
#   carry: build-train/fortunes   (made here by tools/train_tiny/prepare_data.sh)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/fx /tmp/tr
OUT=$OUT bash tools/device/ceilings.sh  # -> $OUT/ceilings.txt
python3 tools/make_fixtures.py /tmp/fx 2>&1 | tee "$OUT/fixtures.log"
tar czf "$OUT/fixtures.tgz" -C /tmp/fx .
python3 tools/train_tiny/train.py build-train/fortunes /tmp/tr --seconds "${TRAIN_SECONDS:-240}" 2>&1 | tee "$OUT/train.log"
tar czf "$OUT/train.tgz" -C /tmp/tr .
ls -la "$OUT"
