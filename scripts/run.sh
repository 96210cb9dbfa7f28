#!/usr/bin/env bash
# `make run`: Envoy in the foreground with envoy/envoy.yaml (crawlguard with its embedded
# default configuration in front of the demo origin). Expects `make build` to have run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

WASM=target/wasm32-wasip1/release/crawlguard.wasm
[ -f "$WASM" ] || { echo "$WASM is missing: run \`make build\` first" >&2; exit 1; }

CHROME='Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36'
GOOGLEBOT='Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)'
cat <<MSG
crawlguard: Envoy on http://127.0.0.1:10000 (admin http://127.0.0.1:9901), Ctrl-C to stop.
Try, from another terminal:

  # a browser: 200, the origin saw x-crawler-class: human
  curl -si -A '$CHROME' http://127.0.0.1:10000/

  # a curl flood (class script): 200s, then 429s with Retry-After
  for i in \$(seq 100); do curl -s -o /dev/null -w '%{http_code} ' http://127.0.0.1:10000/; done; echo

  # a Googlebot claim (unverified_bot until verified), and a rejection in full
  for i in \$(seq 30); do curl -s -o /dev/null -w '%{http_code} ' -A '$GOOGLEBOT' http://127.0.0.1:10000/; done; echo
  curl -si -A '$GOOGLEBOT' http://127.0.0.1:10000/

  # robots.txt is never limited
  curl -si http://127.0.0.1:10000/robots.txt

  # what crawlguard counted
  curl -s http://127.0.0.1:9901/stats | grep crawlguard

MSG
exec .venv/bin/envoy -c envoy/envoy.yaml --concurrency "${ENVOY_CONCURRENCY:-2}" \
    --component-log-level wasm:debug
