#!/usr/bin/env bash
# `make run-tls`: crawlguard at a TLS edge with every browser signal (envoy/envoy-tls.yaml),
# offline: a self-signed certificate for 127.0.0.1 and a demo ASN database that puts
# 127.0.0.0/24 in a residential network (AS7922, Comcast) and 127.0.1.0/24 in a cloud one
# (AS16509, Amazon: on the catalog's datacenter_asns list). Instead of `make run` (same admin,
# origin and sidecar ports). Expects `make build build-sidecar` to have run. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

WASM=target/wasm32-wasip1/release/crawlguard.wasm
VERIFIER=target/release/crawlguard-sidecar
[ -f "$WASM" ] || { echo "$WASM is missing: run \`make build\` first" >&2; exit 1; }
[ -x "$VERIFIER" ] || { echo "$VERIFIER is missing: run \`make build-sidecar\` first" >&2; exit 1; }

DIR=target/run-tls
mkdir -p "$DIR"
# A throwaway self-signed certificate (curl -k / chromium --ignore-certificate-errors).
[ -f "$DIR/cert.pem" ] || openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$DIR/key.pem" -out "$DIR/cert.pem" -days 30 -subj /CN=127.0.0.1 \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" 2>/dev/null
# The demo ASN database (GeoLite2-ASN layout), built with mmdb-writer from .venv/.
.venv/bin/python integration/scripts/asn-mmdb.py "$DIR/asn.mmdb" \
    127.0.0.0/24=7922:Comcast 127.0.1.0/24=16509:Amazon
sed -e "s|/etc/envoy/tls/|$DIR/|g" -e "s|/usr/share/GeoIP/GeoLite2-ASN.mmdb|$DIR/asn.mmdb|" \
    envoy/envoy-tls.yaml > "$DIR/envoy.yaml"

"$VERIFIER" --listen 127.0.0.1:9090 ${VERIFIER_ARGS---config sidecar/sidecar.example.toml} >/dev/null &
VERIFIER_PID=$!
trap 'kill "$VERIFIER_PID" 2>/dev/null || true' EXIT INT TERM

CHROME='Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36'
cat <<MSG
crawlguard at a TLS edge: https://127.0.0.1:10443 (admin http://127.0.0.1:9901, access log on
stdout with tls, proto, ja4 and asn), verifier sidecar on http://127.0.0.1:9090. Ctrl-C stops both.
Try, from another terminal:

  # curl claiming Chrome: its TLS handshake is OpenSSL's (JA4 *_e8f1e7e78f70_*) and it
  # sends no sec-fetch-site: suspect_browser (x-upstream-saw-class echoes the class)
  curl -sk -o /dev/null -w '%{http_code} %header{x-upstream-saw-class}\n' -A '$CHROME' https://127.0.0.1:10443/

  # a real browser (the headless one says HeadlessChrome, itself a script's marker, so give
  # it a desktop Chrome's User-Agent; --no-sandbox only as root): human, over HTTP/2, from
  # the residential network
  chromium --headless=new --no-sandbox --ignore-certificate-errors --user-agent='$CHROME' --dump-dom https://127.0.0.1:10443/

  # from the cloud network (127.0.1.0/24 is AS16509 here) the network check fails too
  curl -sk --interface 127.0.1.1 -o /dev/null -w '%{http_code} %header{x-upstream-saw-class}\n' -A '$CHROME' https://127.0.0.1:10443/

  # the browser checks' counters
  curl -s 'http://127.0.0.1:9901/stats?filter=wasmcustom.crawlguard.browser_check'

MSG
.venv/bin/envoy -c "$DIR/envoy.yaml" --use-dynamic-base-id --concurrency "${ENVOY_CONCURRENCY:-2}" \
    --log-level warn &
ENVOY_PID=$!
scripts/announce-ready.sh "$ENVOY_PID" &
READY_PID=$!
trap 'kill "$ENVOY_PID" "$VERIFIER_PID" "$READY_PID" 2>/dev/null || true' EXIT INT TERM
wait "$ENVOY_PID"
