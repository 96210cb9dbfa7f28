#!/bin/sh
# Entry point of the compose suite's Envoy: renders envoy.yaml.in with the ports from the
# environment, then runs Envoy in the foreground. Works in the official envoyproxy/envoy
# image and in the offline image (Debian + the envoy binary), both have /bin/sh and sed.
set -eu
: "${CG_ENVOY_PORT:?}" "${CG_ENVOY_ADMIN_PORT:?}" "${CG_UPSTREAM_PORT:?}" "${CG_VERIFIER_PORT:?}"
: "${CG_DNS_PORT:=}"
out="$(mktemp -d)/envoy.yaml"
sed -e "s/@ENVOY_PORT@/$CG_ENVOY_PORT/g" \
    -e "s/@ENVOY_ADMIN_PORT@/$CG_ENVOY_ADMIN_PORT/g" \
    -e "s/@UPSTREAM_PORT@/$CG_UPSTREAM_PORT/g" \
    -e "s/@VERIFIER_PORT@/$CG_VERIFIER_PORT/g" \
    -e "s/@DNS_PORT@/$CG_DNS_PORT/g" \
    /etc/crawlguard/compose/envoy.yaml.in > "$out"
if grep -q '@[A-Z_]*@' "$out"; then
    echo "envoy-entrypoint: unrendered placeholders in $out:" >&2
    grep -n '@[A-Z_]*@' "$out" >&2
    exit 1
fi
# --use-dynamic-base-id: with host networking, Envoy's hot-restart domain sockets share the
# host's namespace, so a fixed base id would collide with any other Envoy on the machine.
exec envoy -c "$out" --use-dynamic-base-id \
    --concurrency "${CG_ENVOY_CONCURRENCY:-2}" --drain-time-s 0 \
    --log-level "${CG_ENVOY_LOG_LEVEL:-info}" --component-log-level wasm:info
