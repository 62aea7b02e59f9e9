#!/usr/bin/env bash
# End-to-end tests of `megaserve serve` with real npm clients (openai, the AI SDK,
# LangChain, OpenCode; versions pinned in package.json + package-lock.json).
#   MEGASERVE_BIN=build/megaserve tests/e2e/run.sh [test files...]
# MEGASERVE_BIN: the megaserve binary (built beforehand; this script builds nothing).
# MEGASERVE_E2E_MODEL: checkpoint dir with tokenizer.json and a chat template
#   (default: models/north-mini-demo, the trained demo model, which makes real tool calls).
# E2E_LOAD_SECONDS / E2E_LOAD_CLIENTS: size of the load test (default 20 s, 64 clients).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

: "${MEGASERVE_BIN:?set MEGASERVE_BIN to the megaserve binary}"
MEGASERVE_BIN="$(cd "$(dirname "$MEGASERVE_BIN")" && pwd)/$(basename "$MEGASERVE_BIN")"
[[ -x "$MEGASERVE_BIN" ]] || { echo "run.sh: $MEGASERVE_BIN is not executable" >&2; exit 2; }
export MEGASERVE_BIN

MEGASERVE_E2E_MODEL="${MEGASERVE_E2E_MODEL:-$root/models/north-mini-demo}"
for f in config.json tokenizer.json; do
  [[ -f "$MEGASERVE_E2E_MODEL/$f" ]] || { echo "run.sh: $MEGASERVE_E2E_MODEL/$f is missing" >&2; exit 2; }
done
export MEGASERVE_E2E_MODEL

files=()
for f in "$@"; do files+=("$(realpath "$f")"); done
cd "$here"
# Idempotent: install only when node_modules does not match the lock file.
stamp=node_modules/.megaserve-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  # `npm install --no-save` installs exactly the lock's versions (integrity
  # checked) without rewriting it. Not `npm ci`: it refuses a lock that lacks
  # entries for opencode-ai's optional per-platform binaries, and the npm
  # mirror reachable here serves only the Linux ones (the others 404), so the
  # lock cannot list them.
  rm -rf node_modules
  npm install --no-save --no-audit --no-fund --loglevel=error
  echo "$want" > "$stamp"
fi

[[ ${#files[@]} -gt 0 ]] || files=(*.test.mjs)
exec node --test --test-concurrency=1 "${files[@]}"
