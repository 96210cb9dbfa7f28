#!/usr/bin/env python3
"""A/B of crawlguard builds (or configurations) on the allow path, alternated in one run.

Each variant is NAME=MODULE.wasm (the cg_allow configuration of bench.py) or
NAME=MODULE.wasm:CONFIG.json; `--with-refs` adds Envoy's local_ratelimit and the wasm floor.
Rounds alternate the variants (order reversed every other round); it prints per variant the
median req/s, its ratio to the first variant, and the median Envoy CPU time per request
(from /proc, less sensitive than req/s to other work on the machine). Pinning as in bench.py.

  python3 bench/ab.py --rounds 5 --duration 5 base=/tmp/a.wasm new=target/wasm32-wasip1/release/crawlguard.wasm
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--concurrency", type=int, action="append",
                    help="Envoy concurrency (repeatable; default 1)")
    ap.add_argument("--with-refs", action="store_true",
                    help="also measure local_rl and wasm_floor")
    ap.add_argument("variants", nargs="+", metavar="NAME=MODULE[:CONFIG.json]")
    args = ap.parse_args()
    allow_cfg = json.loads(bench.CONFIGS["cg_allow"][0].split("value: ", 1)[1].split("\n")[0])
    configs = {}
    if args.with_refs:
        configs["local_rl"] = bench.CONFIGS["local_rl"]
        configs["wasm_floor"] = bench.CONFIGS["wasm_floor"]
    for v in args.variants:
        name, _, spec = v.partition("=")
        module, _, cfg_path = spec.partition(":")
        cfg = allow_cfg
        if cfg_path:
            with open(cfg_path) as f:
                cfg = f.read()
        configs[name] = (bench.wasm_filter(os.path.abspath(module), cfg), "", bench.UA_CHROME)
    with tempfile.TemporaryDirectory(prefix="cg-ab-") as tmp:
        results = bench.throughput(tmp, args.rounds, args.duration, args.concurrency or [1],
                                   configs)
    first = [n for n in configs if n not in ("local_rl", "wasm_floor")][0]
    for conc in args.concurrency or [1]:
        base = statistics.median(r["rps"] for r in results[(conc, first)])
        print(f"\nEnvoy concurrency {conc}, {args.rounds} rounds of {args.duration} s, "
              f"pinning: {results[(conc, first)][0]['pinning']}")
        print(f"{'variant':14s} {'median req/s':>12s} {'vs ' + first:>10s} "
              f"{'CPU us/req':>10s}  rounds req/s")
        for name in configs:
            runs = results[(conc, name)]
            rps = statistics.median(r["rps"] for r in runs)
            cpu = statistics.median(r["cpu_us_per_req"] for r in runs)
            print(f"{name:14s} {rps:12.0f} {rps / base:10.3f} {cpu:10.1f}  "
                  + " ".join(f"{r['rps']:.0f}" for r in runs))


if __name__ == "__main__":
    main()
