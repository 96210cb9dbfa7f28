#!/usr/bin/env python3
"""A scraper as the browser-signal tests play it: an HTTP library (Python's http.client
over the ssl module, so OpenSSL's handshake without ALPN) sending a browser User-Agent from
many source addresses over TLS, several requests per address on one keep-alive connection.

    scraper.py CONFIG.json

CONFIG: {"host", "port", "ca", "addresses": [...], "per_address": N, "threads": N,
"path": "/...", "headers": {name: value}, "duration_s": S (optional: go round the addresses
again until S seconds have passed)}. Prints one JSON object: {"statuses": {status: count},
"retry_after": [seconds of each 429/503], "policies": {RateLimit-Policy of a 429: count},
"elapsed_s": wall time from the first request to the last response, "errors": [first few
exceptions]}.
"""
import http.client
import json
import ssl
import sys
import threading
import time


def main(path):
    with open(path) as f:
        cfg = json.load(f)
    ctx = ssl.create_default_context(cafile=cfg["ca"])
    statuses, retry_after, policies, errors = {}, [], {}, []
    lock = threading.Lock()
    todo = list(cfg["addresses"])
    deadline = time.monotonic() + cfg.get("duration_s", 0)

    def worker():
        while True:
            with lock:
                if not todo:
                    if time.monotonic() >= deadline:
                        return
                    todo.extend(cfg["addresses"])
                addr = todo.pop()
            conn = http.client.HTTPSConnection(
                cfg["host"], cfg["port"], context=ctx, source_address=(addr, 0), timeout=30
            )
            try:
                for _ in range(cfg["per_address"]):
                    conn.request("GET", cfg["path"], headers=cfg["headers"])
                    resp = conn.getresponse()
                    resp.read()
                    with lock:
                        statuses[resp.status] = statuses.get(resp.status, 0) + 1
                        if resp.status in (429, 503):
                            retry_after.append(int(resp.getheader("retry-after", "-1")))
                        policy = resp.getheader("ratelimit-policy")
                        if resp.status == 429 and policy:
                            policies[policy] = policies.get(policy, 0) + 1
            except Exception as e:  # counted, never fatal: the test asserts on them
                with lock:
                    errors.append(f"{addr}: {e!r}")
            finally:
                conn.close()

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(cfg["threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    print(json.dumps({
        "statuses": {str(k): v for k, v in statuses.items()},
        "retry_after": retry_after,
        "policies": policies,
        "elapsed_s": elapsed,
        "errors": errors[:5],
    }))


if __name__ == "__main__":
    main(sys.argv[1])
