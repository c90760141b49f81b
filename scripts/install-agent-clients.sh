#!/usr/bin/env bash
# Install the pinned agent CLIs (Claude Code, Codex) from npm into .cache/npm-clients/ (git-ignored).
# Idempotent: when the pinned versions are already there it only prints where they are.
# The e2e tests (tests/test_clients_e2e.py) look for the binaries in that folder.
set -euo pipefail
cd "$(dirname "$0")/.."
CLAUDE_VERSION=2.1.332
CODEX_VERSION=0.171.0
dir=${CRUCIBLE_NPM_CLIENTS:-.cache/npm-clients}  # CI sets it outside the clone, to cache between runs
bin="$dir/node_modules/.bin"

installed() {  # $1 binary, $2 version: true when the binary reports that version
  [[ -x "$bin/$1" ]] && "$bin/$1" --version 2>/dev/null | grep -q "$2"
}

if ! installed claude "$CLAUDE_VERSION" || ! installed codex "$CODEX_VERSION"; then
  command -v npm >/dev/null || { echo "install-agent-clients: npm is missing; install Node.js 20+ first" >&2; exit 1; }
  mkdir -p "$dir"
  [[ -f "$dir/package.json" ]] || echo '{"private": true}' > "$dir/package.json"
  # Claude Code's postinstall only optimizes start-up; the CLI runs without it, so npm may skip it.
  npm install --prefix "$dir" --save-exact --no-fund --no-audit --loglevel=error \
    "@anthropic-ai/claude-code@$CLAUDE_VERSION" "@openai/codex@$CODEX_VERSION" >&2
fi
installed claude "$CLAUDE_VERSION" || { echo "install-agent-clients: claude $CLAUDE_VERSION did not install" >&2; exit 1; }
installed codex "$CODEX_VERSION" || { echo "install-agent-clients: codex $CODEX_VERSION did not install" >&2; exit 1; }
abs_bin=$(cd "$bin" && pwd)
echo "claude: $abs_bin/claude ($CLAUDE_VERSION)"
echo "codex: $abs_bin/codex ($CODEX_VERSION)"
