#!/usr/bin/env bash
# `make run`: the sidecar (crawlguard-sidecar) on 127.0.0.1:9090 and Envoy in the foreground
# with envoy/envoy.yaml (crawlguard in front of the demo origin) and the configuration in
# envoy/examples/make-run.json: the embedded default with short escalation for scripts and
# spoofed claims, so the demo's own floods show escalation without locking 127.0.0.1 out for
# an hour. Expects `make build build-sidecar` to have run. Ctrl-C stops both.
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

# envoy.yaml with the demo configuration (one line of JSON, a single-quoted YAML scalar).
DEMO_CONFIG=envoy/examples/make-run.json
DEMO_YAML=target/make-run/envoy.yaml
mkdir -p "$(dirname "$DEMO_YAML")"
grep -q 'value: ""' envoy/envoy.yaml || { echo "envoy/envoy.yaml has no empty configuration value" >&2; exit 1; }
sed "s|value: \"\"|value: '$(tr -d '\n' < "$DEMO_CONFIG")'|" envoy/envoy.yaml > "$DEMO_YAML"

CHROME='Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36'
GOOGLEBOT='Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)'
cat <<MSG
crawlguard: Envoy on http://127.0.0.1:10000 (admin http://127.0.0.1:9901), verifier sidecar on
http://127.0.0.1:9090 (/metrics), Ctrl-C to stop both.
Try, from another terminal:

  # a browser: 200; the origin got x-crawler-class: human (it echoes it as x-upstream-saw-class)
  curl -si -A '$CHROME' http://127.0.0.1:10000/

  # a curl flood (class script): 10 200s, then 429s with their Retry-After; ignoring it
  # escalates (1 1 1, then 2 4 8 16 s, plus jitter 0..10). The demo caps that at 16 s and
  # forgets it 30 s after the last ignored one (the default: 3600 s, forgotten after 600 s)
  for i in \$(seq 20); do curl -s -o /dev/null -w '%{http_code}:%header{retry-after} ' http://127.0.0.1:10000/; done; echo

  # a Googlebot claim: checked by the verifier; from 127.0.0.1 it is spoofed (loopback is
  # never a crawler's address), so it gets the strict spoofed limit; a rejection in full
  for i in \$(seq 30); do curl -s -o /dev/null -w '%{http_code} ' -A '$GOOGLEBOT' http://127.0.0.1:10000/; done; echo
  curl -si -A '$GOOGLEBOT' http://127.0.0.1:10000/

  # robots.txt is exempt from every class limit and from shedding; only its own generous
  # per-client exempt_limit applies (60 at once, then 1/s)
  curl -si http://127.0.0.1:10000/robots.txt

  # what crawlguard counted (counts lag the requests by up to 250 ms: one root tick)
  curl -s 'http://127.0.0.1:9901/stats?filter=wasmcustom.crawlguard'

  # only 429s? 127.0.0.1 is serving a penalty (Envoy's access log shows retry_after=...):
  # wait the Retry-After of the last 429 (at most 26 s for curl, 240 s for the Googlebot
  # claim), send from another loopback address
  # (curl --interface 127.0.0.2 ...), or restart make run (state lives in Envoy's memory)

MSG
.venv/bin/envoy -c "$DEMO_YAML" --use-dynamic-base-id --concurrency "${ENVOY_CONCURRENCY:-2}" \
    --log-level warn --component-log-level wasm:debug &
ENVOY_PID=$!
scripts/announce-ready.sh "$ENVOY_PID" &
READY_PID=$!
trap 'kill "$ENVOY_PID" "$VERIFIER_PID" "$READY_PID" 2>/dev/null || true' EXIT INT TERM
wait "$ENVOY_PID"
