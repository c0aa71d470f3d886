#!/usr/bin/env bash
# Installs the official `openai` npm package (the version package-lock.json pins) into
# tests/server/client/node_modules for the server tests (tests/server/server_cases.py). Not
# committed. Needs node and npm (registry access).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ -f "$here/node_modules/openai/package.json" ]; then
  echo "fetch_client: already in $here/node_modules"
  exit 0
fi
command -v npm >/dev/null || { echo "fetch_client: npm not found" >&2; exit 1; }
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
