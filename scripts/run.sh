#!/usr/bin/env bash
# `make run`: the sidecar (crawlguard-sidecar) on 127.0.0.1:9090 and Envoy in the foreground
# with envoy/envoy.yaml (crawlguard with its embedded default configuration in front of the
# demo origin). Expects `make build build-sidecar` to have run. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

WASM=target/wasm32-wasip1/release/crawlguard.wasm
VERIFIER=target/release/crawlguard-sidecar
[ -f "$WASM" ] || { echo "$WASM is missing: run \`make build\` first" >&2; exit 1; }
[ -x "$VERIFIER" ] || { echo "$VERIFIER is missing: run \`make build-sidecar\` first" >&2; exit 1; }

# The sidecar resolves with the system's resolv.conf. Its published IP ranges come from the
# example configuration's range *files* (copies in ../shared/data; `builtin_urls = false`), so
# `make run` needs no network; VERIFIER_ARGS replaces that, e.g. VERIFIER_ARGS="" to fetch the
# vendors' URLs (cached in /var/cache/crawlguard-sidecar, or --cache-dir DIR).
"$VERIFIER" --listen 127.0.0.1:9090 ${VERIFIER_ARGS---config sidecar/sidecar.example.toml} >/dev/null &
VERIFIER_PID=$!
trap 'kill "$VERIFIER_PID" 2>/dev/null || true' EXIT INT TERM

CHROME='Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36'
GOOGLEBOT='Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)'
cat <<MSG
crawlguard: Envoy on http://127.0.0.1:10000 (admin http://127.0.0.1:9901), verifier sidecar on
http://127.0.0.1:9090 (/metrics), Ctrl-C to stop both.
Try, from another terminal:

  # a browser: 200; the origin got x-crawler-class: human (it echoes it as x-upstream-saw-class)
  curl -si -A '$CHROME' http://127.0.0.1:10000/

  # a curl flood (class script): 200s, then 429s with Retry-After
  for i in \$(seq 100); do curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:10000/; done; echo

  # a Googlebot claim: checked by the verifier; from 127.0.0.1 it is spoofed (loopback is
  # never a crawler's address), so it gets the strict spoofed limit; a rejection in full
  for i in \$(seq 30); do curl -s -o /dev/null -w '%{http_code} ' -A '$GOOGLEBOT' http://127.0.0.1:10000/; done; echo
  curl -si -A '$GOOGLEBOT' http://127.0.0.1:10000/

  # robots.txt is never limited
  curl -si http://127.0.0.1:10000/robots.txt

  # what crawlguard counted
  curl -s 'http://127.0.0.1:9901/stats?filter=wasmcustom.crawlguard'

MSG
.venv/bin/envoy -c envoy/envoy.yaml --concurrency "${ENVOY_CONCURRENCY:-2}" \
    --log-level warn --component-log-level wasm:debug &
ENVOY_PID=$!
trap 'kill "$ENVOY_PID" "$VERIFIER_PID" 2>/dev/null || true' EXIT INT TERM
wait "$ENVOY_PID"
