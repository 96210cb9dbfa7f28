#!/usr/bin/env bash
# Prints "crawlguard: ready ..." once the Envoy with pid $1 serves (its admin /ready on
# 127.0.0.1:9901 answers LIVE); quiet if that Envoy exits first. Run in the background by
# scripts/run.sh (make run) and scripts/run-tls.sh (make run-tls).
set -u
ENVOY_PID="$1"
for _ in $(seq 1200); do
    kill -0 "$ENVOY_PID" 2>/dev/null || exit 0
    if curl -sf http://127.0.0.1:9901/ready >/dev/null 2>&1; then
        echo "crawlguard: ready (http://127.0.0.1:9901/ready is LIVE): try the lines above"
        exit 0
    fi
    sleep 0.5
done
