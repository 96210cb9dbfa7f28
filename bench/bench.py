#!/usr/bin/env python3
"""`make bench`: crawlguard against Envoy's native limiter, measured together.

A benchmark, not a test: it prints and writes `bench/results.md` (table, machine, date and the
exact commands). Everything runs on loopback. Configurations (same Envoy 1.40 binary, same
listener, same upstream):

  1 none          Envoy with no rate-limit filter (the physical limit)
  2 local_rl      envoy.filters.http.local_ratelimit, a per-client bucket that never rejects
  3 wasm_floor    a trivial Rust proxy-wasm filter that only reads the User-Agent (bench/ua-only)
  4 cg_allow      crawlguard, allow path (browser UA, two matching limits)
  5 cg_reject     crawlguard, reject path (bucket empty: 429 local reply)
  6 cg_verified   crawlguard, verified-crawler path with a warm verdict cache
  7 cg_shedding   4 with load shedding enabled (healthy origin: the cost of measuring it)
  8 cg_fleet      4 with fleet mode on: the real sidecar and a real Redis (redis-server),
                  syncing every 500 ms; the sync traffic per Envoy per second is reported
  9 cg_signals    4 with every browser signal configured (client_signals) and a consistent
                  Chrome's headers, JA4 and network
  10 cg_signed    a signed agent's request (Web Bot Auth, browser UA): one callout per
                   request to the real sidecar, which verifies the ed25519 signature with the
                   agent's key directory (served over TLS on loopback); the sidecar's CPU per
                   request and time per verification are reported too
  11 cg_in_flight 4 with a concurrency limit per address far from its cap (max_in_flight
                   10,000): the cost of counting requests in flight (issue 23)
  12 cg_signals_off 9's client (a Chrome with its fetch metadata, client hints, JA4 and ASN
                   headers) with no signal configured: 9 against 12 is what the signals
                   cost, apart from Envoy's work on the headers such a client sends anyway

Each (concurrency, configuration) is measured in several rounds, configurations alternated
within a round, so the ratios come from figures taken together. Load: wrk on loopback.

Also: exactness (N clients on one bucket, allowed vs burst + rate x t), memory (Envoy RSS
before/after many requests from distinct client addresses), the verifier (latency on
cache hits; the filter's added latency on a verdict miss), and the `crawlguard` command's
log throughput (`report` and `replay` on 1,000,000 real log lines, one core; target
>= 500,000 lines/s).

Usage: bench/bench.py [--rounds N] [--duration S] [--quick] [--cli-only] [--in-flight-only]
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENVOY = os.environ.get("CRAWLGUARD_ENVOY", os.path.join(ROOT, ".venv/bin/envoy"))
# The module measured: $CRAWLGUARD_WASM (as the integration harness reads it), else the build.
CG_WASM = os.environ.get("CRAWLGUARD_WASM") or os.path.join(
    ROOT, "target/wasm32-wasip1/release/crawlguard.wasm")
FLOOR_WASM = os.path.join(ROOT, "target/bench/wasm32-wasip1/release/ua_only.wasm")
UA_CHROME = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
             "(KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36")
UA_GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
# A consistent current Chrome as the browser checks see it with every signal configured
# (cg_signals): its fetch metadata and client hints, and what Envoy's TLS edge would add
# (envoy/envoy-tls.yaml): Chromium's JA4 and an access network's ASN.
CHROME_WITH_SIGNALS = {
    "User-Agent": UA_CHROME,
    "sec-fetch-site": "none",
    "sec-ch-ua": '"Chromium";v="124", "Not-A.Brand";v="24"',
    "x-crawlguard-ja4": "t13d1516h2_8daaf6152771_02713d6af862",
    "x-crawlguard-asn": "7922",
}
COMMANDS = []


def request_headers(client):
    """A configuration's client: a User-Agent, or a dict of request headers."""
    return client if isinstance(client, dict) else {"User-Agent": client}


def sh(cmd, **kw):
    COMMANDS.append(" ".join(cmd) if isinstance(cmd, list) else cmd)
    return subprocess.run(cmd, check=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def pinned(cpus, cmd):
    """`cmd` under `taskset -c cpus` (as is when cpus is None or taskset is missing)."""
    if cpus is None or not shutil.which("taskset"):
        return cmd
    return ["taskset", "-c", cpus] + cmd


# Core pinning of the throughput runs (taskset): at Envoy concurrency 1 the measured Envoy
# gets core 0 alone and wrk + the upstream Envoy share core 1, so the ratio measures Envoy
# rather than CPU sharing. At concurrency 2 on a 2-core machine full separation is
# impossible (2 workers + wrk + upstream on 2 cores): nothing is pinned, and the results say
# so. On machines with more cores the same split keeps Envoy on cores 0..c-1.
def pinning(conc):
    n = os.cpu_count() or 1
    if n <= conc:
        return None, None
    return ",".join(str(i) for i in range(conc)), ",".join(str(i) for i in range(conc, n))


class Envoy:
    """One Envoy process with a generated config; waits for /ready, stops on exit."""

    def __init__(self, yaml_text, concurrency, tmp, name, cpus=None):
        self.admin = free_port()
        self.concurrency = concurrency
        self.path = os.path.join(tmp, f"{name}.yaml")
        with open(self.path, "w") as f:
            f.write(yaml_text.replace("ADMIN_PORT", str(self.admin)))
        self.log = open(os.path.join(tmp, f"{name}.log"), "w")
        cmd = pinned(cpus, [ENVOY, "-c", self.path, "--concurrency", str(concurrency),
                            "--use-dynamic-base-id", "-l", "warn"])
        COMMANDS.append(" ".join(cmd))
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"envoy {name} exited; see {self.log.name}")
            try:
                if http_get(f"http://127.0.0.1:{self.admin}/ready").strip() == "LIVE":
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"envoy {name} not ready")

    def stats(self):
        """Envoy's counters once every crawlguard VM flushed after the call (crawlguard
        counts in VM memory and flushes every 250 ms per VM: `crawlguard.stats.flushes` must
        go up by two per VM, workers and the main thread)."""
        name = "wasmcustom.crawlguard.stats.flushes"
        start = self.stats_now().get(name)
        if start is not None:
            deadline = time.time() + 10
            while time.time() < deadline and self.stats_now().get(name, 0) < start + 2 * (self.concurrency + 1):
                time.sleep(0.05)
        return self.stats_now()

    def stats_now(self):
        out = {}
        for line in http_get(f"http://127.0.0.1:{self.admin}/stats").splitlines():
            k, _, v = line.partition(": ")
            if v.isdigit():
                out[k] = int(v)
        return out

    def cpu_s(self):
        """User + system CPU seconds used by this Envoy so far (/proc/<pid>/stat)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def upstream_yaml(origin_port, verifier_port):
    """Origin (200, small body) and a fake verifier answering `verified` for 127.0.0.1."""
    answer = json.dumps({"ip": "127.0.0.1", "bot": "googlebot", "verdict": "verified",
                         "method": "fcrdns", "host": "crawl-127-0-0-1.googlebot.com",
                         "ttl_s": 86400})
    return f"""
admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: ADMIN_PORT}}}}}}
static_resources:
  listeners:
  - name: origin
    address: {{socket_address: {{address: 127.0.0.1, port_value: {origin_port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: origin
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                direct_response: {{status: 200, body: {{inline_string: "hello from the bench origin\\n"}}}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  - name: verifier
    address: {{socket_address: {{address: 127.0.0.1, port_value: {verifier_port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: verifier
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match:
                  path: "/v1/verify"
                  query_parameters:
                  - {{name: ip, string_match: {{exact: "127.0.0.1"}}}}
                  - {{name: bot, string_match: {{exact: "googlebot"}}}}
                direct_response: {{status: 200, body: {{inline_string: {json.dumps(answer)}}}}}
              - match: {{prefix: "/"}}
                direct_response: {{status: 404}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
"""


def wasm_filter(path, config_json):
    return f"""
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: bench
                root_id: crawlguard
                failure_policy: FAIL_OPEN
                configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: {json.dumps(config_json)}
                vm_config:
                  vm_id: bench
                  runtime: envoy.wasm.runtime.v8
                  code: {{local: {{filename: {path}}}}}"""


LOCAL_RL = """
          - name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: bench_local_rl
              token_bucket: {max_tokens: 1000000000, tokens_per_fill: 1000000000, fill_interval: 1s}
              filter_enabled:
                runtime_key: bench_rl_enabled
                default_value: {numerator: 100, denominator: HUNDRED}
              filter_enforced:
                runtime_key: bench_rl_enforced
                default_value: {numerator: 100, denominator: HUNDRED}
              descriptors:
              - entries: [{key: remote_address}]
                token_bucket: {max_tokens: 1000000000, tokens_per_fill: 1000000000, fill_interval: 1s}"""

# Route-level descriptor so local_ratelimit keeps one bucket per client address.
LOCAL_RL_ROUTE_ACTIONS = """
                  rate_limits:
                  - actions:
                    - remote_address: {}"""


def front_yaml(port, origin_port, verifier_port, filters, route_extra="", xff=False,
               fleet_port=None):
    return f"""
admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: ADMIN_PORT}}}}}}
static_resources:
  listeners:
  - name: main
    address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: main
          use_remote_address: true
          skip_xff_append: true
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route:
                  cluster: origin{route_extra}
          http_filters:{filters}
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: origin
    type: STATIC
    load_assignment:
      cluster_name: origin
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {origin_port}}}}}}}}}]}}]
  - name: crawlguard_verifier
    type: STATIC
    load_assignment:
      cluster_name: crawlguard_verifier
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {verifier_port}}}}}}}}}]}}]
  - name: crawlguard_fleet
    type: STATIC
    load_assignment:
      cluster_name: crawlguard_fleet
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {fleet_port or verifier_port}}}}}}}}}]}}]
"""


def limit(name, cls, rate, burst, key="client_ip"):
    return {"name": name, "class": cls, "route": "*", "rate_per_s": rate, "burst": burst,
            "key": key}


BIG = 1_000_000
# store.slots when the configuration does not set it (core/src/config/defaults.rs).
DEFAULT_SLOTS = 65_536
CONFIGS = {
    # name: (filters, route_extra, user agent, crawlguard config or None)
    "none": ("", "", UA_CHROME),
    "local_rl": (LOCAL_RL, LOCAL_RL_ROUTE_ACTIONS, UA_CHROME),
    "wasm_floor": (wasm_filter(FLOOR_WASM, ""), "", UA_CHROME),
    "cg_allow": (wasm_filter(CG_WASM, json.dumps({"limits": [
        limit("human_per_ip", "human", BIG, BIG), limit("all_global", "*", BIG, BIG, "global")]})),
        "", UA_CHROME),
    "cg_reject": (wasm_filter(CG_WASM, json.dumps({"limits": [
        limit("human_per_ip", "human", 0.000001, 1)]})), "", UA_CHROME),
    "cg_verified": (wasm_filter(CG_WASM, json.dumps({"limits": [
        limit("crawler_per_ip", "search_crawler", BIG, BIG),
        limit("all_global", "*", BIG, BIG, "global")]})), "", UA_GOOGLEBOT),
    # Issue 14's target: shedding enabled on a healthy origin costs <= 5% of the allow path.
    "cg_shedding": (wasm_filter(CG_WASM, json.dumps({
        "shedding": {"enabled": True, "latency_ms": 10_000},
        "limits": [limit("human_per_ip", "human", BIG, BIG),
                   limit("all_global", "*", BIG, BIG, "global")]})), "", UA_CHROME),
    # Issue 13's target: fleet mode (syncing through the real sidecar to a real Redis) costs
    # <= 5% of the allow path. The sync goes to cluster crawlguard_fleet (the sidecar started
    # by throughput()); verifier callouts, none on this path, to the fake verifier.
    "cg_fleet": (wasm_filter(CG_WASM, json.dumps({
        "fleet": {"enabled": True, "cluster": "crawlguard_fleet", "sync_interval_ms": 500},
        "store": {"hash_seed": 4242},
        "limits": [limit("human_per_ip", "human", BIG, BIG),
                   limit("all_global", "*", BIG, BIG, "global")]})), "", UA_CHROME),
    # Issue 22's target: every browser signal configured (a consistent Chrome: its headers,
    # JA4 and network, HTTP/1.1 at a listener said to offer h2, so the HTTP version check
    # reads the protocol and the TLS attribute too) costs <= 10% of the allow path.
    "cg_signals": (wasm_filter(CG_WASM, json.dumps({
        "client_signals": {"ja4_header": "x-crawlguard-ja4", "asn_header": "x-crawlguard-asn",
                           "listener_offers_h2": True},
        "limits": [limit("human_per_ip", "human", BIG, BIG),
                   limit("all_global", "*", BIG, BIG, "global")]})), "", CHROME_WITH_SIGNALS),
    # A signed agent (README "Signed agents"): every request's signature is checked by the
    # sidecar (cluster crawlguard_fleet, the sidecar throughput() starts). SIGNED_ORIGIN is
    # the agent's key directory, started by throughput(); the signature carries no nonce, so
    # the same headers verify on every request (a nonce would be a replay after the first).
    "cg_signed": (wasm_filter(CG_WASM, json.dumps({
        "verifier": {"cluster": "crawlguard_fleet", "timeout_ms": 1000},
        "signed_agents": {"agents": [
            {"id": "bench-agent", "origin": "SIGNED_ORIGIN", "class": "ai_retriever"}]},
        "limits": [limit("agent_per_bot", "ai_retriever", BIG, BIG, "bot"),
                   limit("all_global", "*", BIG, BIG, "global")]})), "", UA_CHROME),
    # Issue 23's target: a concurrency limit costs at most one shared-data read and write
    # per request where it matches (here far from its cap: the give-backs are held back and
    # written on the tick), none where none does (cg_allow).
    "cg_in_flight": (wasm_filter(CG_WASM, json.dumps({"limits": [
        limit("human_per_ip", "human", BIG, BIG), limit("all_global", "*", BIG, BIG, "global"),
        {"name": "human_in_flight", "class": "human", "route": "*", "max_in_flight": 10_000,
         "key": "client_ip"}]})), "", UA_CHROME),
    # cg_signals' client (the same request headers) with no signal configured: what the
    # signals themselves cost, apart from Envoy's work on the extra headers a browser sends.
    "cg_signals_off": (wasm_filter(CG_WASM, json.dumps({
        "limits": [limit("human_per_ip", "human", BIG, BIG),
                   limit("all_global", "*", BIG, BIG, "global")]})), "", CHROME_WITH_SIGNALS),
}

WBA = os.path.join(ROOT, "integration/scripts/web_bot_auth.py")


def signed_agent(tmp):
    """A Web Bot Auth agent for cg_signed (integration/scripts/web_bot_auth.py, Python's
    cryptography): a CA, a key, its directory over TLS on loopback, and the headers of one
    signature without a nonce valid for 50 minutes. Returns (sidecar TOML, origin, headers,
    directory process)."""
    def py(*args, stdin=None):
        COMMANDS.append(" ".join(["python3", WBA] + list(args)))
        return subprocess.run(["python3", WBA] + list(args), input=stdin, check=True,
                              capture_output=True, text=True).stdout
    certs = os.path.join(tmp, "certs")
    os.makedirs(certs, exist_ok=True)
    py("certs", certs)
    key = json.loads(py("keygen"))
    with open(os.path.join(tmp, "jwks.json"), "w") as f:
        json.dump({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": key["x"]}]}, f)
    cmd = ["python3", WBA, "serve", "--mode", "ok", "--jwks", os.path.join(tmp, "jwks.json"),
           "--max-age", "3600", "--cert", os.path.join(certs, "cert.pem"),
           "--key", os.path.join(certs, "key.pem")]
    COMMANDS.append(" ".join(cmd))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = int(proc.stdout.readline().strip().rsplit(":", 1)[1])
    origin = f"https://localhost:{port}"
    toml = os.path.join(tmp, "agents.toml")
    with open(toml, "w") as f:
        f.write(f'[agents]\norigins = ["{origin}"]\nextra_ca_file = "{certs}/ca.pem"\n')
    now = int(time.time())
    spec = {"d": key["d"], "keyid": key["keyid"], "method": "GET", "authority": "AUTHORITY",
            "scheme": "http", "path": "/", "headers": {"signature-agent": f'"{origin}"'},
            "components": ["@authority", "@path", "signature-agent"], "created": now,
            "expires": now + 3000, "tag": "web-bot-auth"}
    return toml, origin, spec, proc


def signed_headers(spec, authority):
    """The signature headers of `spec` for requests to `authority`."""
    out = json.loads(subprocess.run(["python3", WBA, "sign"], check=True, capture_output=True,
                                    text=True, input=json.dumps(dict(spec, authority=authority))
                                    ).stdout)
    return [f"Signature-Input: {out['signature-input']}", f"Signature: {out['signature']}",
            f"Signature-Agent: {spec['headers']['signature-agent']}"]


def proc_cpu_s(pid):
    """User + system CPU seconds used by process `pid` so far (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wrk(url, ua, duration, connections, threads=2, script=None, cpus=None, headers=()):
    """`ua`: a User-Agent, or a dict of request headers (`request_headers`); `headers`: more
    header lines (`Name: value`)."""
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency"]
    for k, v in request_headers(ua).items():
        cmd += ["-H", f"{k}: {v}"]
    for h in headers:
        cmd += ["-H", h]
    if script:
        cmd += ["-s", script]
    cmd.append(url)
    cmd = pinned(cpus, cmd)
    COMMANDS.append(" ".join(repr(c) if " " in c else c for c in cmd))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def pct(p):
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        if not m:
            return float("nan")
        v, unit = float(m.group(1)), m.group(2)
        return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v

    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    total = re.search(r"(\d+) requests in", out)
    return {"rps": rps, "p50_ms": pct(50), "p99_ms": pct(99),
            "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "requests": int(total.group(1)) if total else 0}


def wait_port(port, proc, what, timeout_s=30):
    """Wait until 127.0.0.1:port accepts a connection (or `proc` exits)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} not listening on {port}")


def fleet_store(tmp, agents_toml=None):
    """A real Redis and the real sidecar in fleet mode (--redis), with `agents_toml` as its
    configuration (the signed agent's directory on loopback). Returns (port, [procs])."""
    redis_port, sidecar_port = free_port(), free_port()
    cmd = ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--dir", tmp]
    COMMANDS.append(" ".join(cmd))
    redis = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(redis_port, redis, "redis-server")
    cmd = [VERIFIER_BIN, "--listen", f"127.0.0.1:{sidecar_port}", "--no-builtin-range-urls",
           "--cache-dir", tmp, "--redis", f"redis://127.0.0.1:{redis_port}/0",
           "--log-level", "warn"]
    if agents_toml:
        cmd += ["--config", agents_toml, "--allow-loopback-agent-directories"]
    COMMANDS.append(" ".join(cmd))
    sidecar = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(sidecar_port, sidecar, "crawlguard-sidecar")
    return sidecar_port, [sidecar, redis]


def throughput(tmp, rounds, duration, concurrencies, configs=None):
    """Every configuration of `configs` (default CONFIGS) at each Envoy concurrency, `rounds`
    alternated rounds; per run req/s, latency, Envoy CPU per request and the pinning."""
    configs = configs or CONFIGS
    origin_port, verifier_port = free_port(), free_port()
    _, others = pinning(1)
    upstream = Envoy(upstream_yaml(origin_port, verifier_port), 1, tmp, "upstream", cpus=others)
    agents_toml, signed_origin, signed_spec, directory = signed_agent(tmp)
    fleet_port, fleet_procs = fleet_store(tmp, agents_toml)
    fleet_procs.append(directory)
    results = {}
    try:
        for conc in concurrencies:
            envoy_cpus, load_cpus = pinning(conc)
            for r in range(rounds):
                order = list(configs) if r % 2 == 0 else list(reversed(configs))
                for name in order:
                    filters, route_extra, ua = configs[name]
                    filters = filters.replace("SIGNED_ORIGIN", signed_origin)
                    port = free_port()
                    headers = (signed_headers(signed_spec, f"127.0.0.1:{port}")
                               if name == "cg_signed" else [])
                    env = Envoy(front_yaml(port, origin_port, verifier_port, filters, route_extra,
                                           fleet_port=fleet_port),
                                conc, tmp, f"{name}-c{conc}", cpus=envoy_cpus)
                    try:
                        url = f"http://127.0.0.1:{port}/"
                        # warm-up: JIT, connections, verdicts, the agent's key directory
                        wrk(url, ua, 1, 8, cpus=load_cpus, headers=headers)
                        before = env.stats()
                        t0 = time.time()
                        cpu0 = env.cpu_s()
                        side0 = proc_cpu_s(fleet_procs[0].pid)
                        res = wrk(url, ua, duration, 16 * conc, cpus=load_cpus, headers=headers)
                        cpu = env.cpu_s() - cpu0
                        res["cpu_us_per_req"] = 1e6 * cpu / max(res["requests"], 1)
                        res["sidecar_cpu_us_per_req"] = (
                            1e6 * (proc_cpu_s(fleet_procs[0].pid) - side0)
                            / max(res["requests"], 1))
                        res["seconds"] = time.time() - t0
                        res["pinning"] = (f"Envoy on CPU {envoy_cpus}, wrk + upstream on CPU "
                                          f"{load_cpus}" if envoy_cpus else "none")
                        after = env.stats()
                        res["stats"] = {k: v for k, v in after.items()
                                        if "crawlguard" in k or "bench_local_rl" in k}
                        # What the measured window added (the fleet's sync traffic per second).
                        res["delta"] = {k: v - before.get(k, 0) for k, v in res["stats"].items()}
                        results.setdefault((conc, name), []).append(res)
                        print(f"  c={conc} round {r + 1} {name:12s} {res['rps']:9.0f} req/s "
                              f"p50 {res['p50_ms']:.3f} ms p99 {res['p99_ms']:.3f} ms "
                              f"cpu {res['cpu_us_per_req']:.1f} us/req "
                              f"non-2xx {res['non2xx']}", flush=True)
                    finally:
                        env.stop()
        results["verify_s"] = sidecar_verify_seconds(fleet_port)
    finally:
        upstream.stop()
        for p in fleet_procs:
            p.terminate()
            p.wait()
    return results


def sidecar_verify_seconds(port):
    """The sidecar's mean ed25519 verification time, seconds, and the verifications it made
    (crawlguard_sidecar_signature_verify_seconds, sum / count)."""
    text = http_get(f"http://127.0.0.1:{port}/metrics")
    total = re.search(r"^crawlguard_sidecar_signature_verify_seconds_sum ([\d.e+-]+)$", text, re.M)
    count = re.search(r"^crawlguard_sidecar_signature_verify_seconds_count (\d+)$", text, re.M)
    n = int(count.group(1)) if count else 0
    return (float(total.group(1)) / n if total and n else float("nan"), n)


def exactness(tmp, concurrencies, seconds=10, rate=20.0, burst=50, clients=32):
    """N clients hammer one global bucket; allowed must be burst + rate x t (+-1)."""
    origin_port, verifier_port = free_port(), free_port()
    upstream = Envoy(upstream_yaml(origin_port, verifier_port), 1, tmp, "upstream-exact")
    rows = []
    try:
        for conc in concurrencies:
            port = free_port()
            cfg = json.dumps({"limits": [limit("one_bucket", "*", rate, burst, "global")]})
            env = Envoy(front_yaml(port, origin_port, verifier_port, wasm_filter(CG_WASM, cfg)),
                        conc, tmp, f"exact-c{conc}")
            try:
                t0 = time.time()
                res = wrk(f"http://127.0.0.1:{port}/", UA_CHROME, seconds, clients)
                elapsed = time.time() - t0
                st = env.stats()
                allowed = st.get("wasmcustom.crawlguard.class.human.allowed", 0)
                limited = st.get("wasmcustom.crawlguard.class.human.limited", 0)
                fail_open = st.get("wasmcustom.crawlguard.class.human.fail_open", 0)
                # wrk's own window is `seconds`; our wall clock around it bounds it from above.
                theory_lo = burst + int(rate * seconds)
                theory_hi = burst + int(rate * elapsed)
                rows.append({"concurrency": conc, "clients": clients, "seconds": seconds,
                             "allowed": allowed, "limited": limited, "fail_open": fail_open,
                             "theory": f"{theory_lo}..{theory_hi}",
                             "ok": theory_lo - 1 <= allowed <= theory_hi + 1,
                             "requests": res["requests"]})
                print(f"  exactness c={conc}: allowed {allowed} theory {theory_lo}..{theory_hi} "
                      f"limited {limited} fail_open {fail_open}", flush=True)
            finally:
                env.stop()
    finally:
        upstream.stop()
    return rows


XFF_LUA = """
-- wrk.format with a header table replaces wrk.headers (the -H headers): merge them.
function with_xff(ip)
  local h = {}
  for k, v in pairs(wrk.headers) do h[k] = v end
  h["X-Forwarded-For"] = ip
  return h
end
-- Every request from a new client address 127.x.y.z, via x-forwarded-for.
local n = 0
local base = 0
function setup(thread)
  thread:set("base", base)
  base = base + 8000000
end
function request()
  n = n + 1
  local v = base + n
  local ip = string.format("127.%d.%d.%d", math.floor(v / 65536) % 256, math.floor(v / 256) % 256, v % 256)
  return wrk.format("GET", "/", with_xff(ip))
end
"""


def idle_rss_kib(tmp, origin_port, verifier_port, slots, name):
    """RSS of an idle Envoy (concurrency 2) whose filter pre-created `slots` bucket slots."""
    port = free_port()
    cfg = json.dumps({"client_ip": {"source": "xff", "xff_trusted_hops": 1},
                      "store": {"slots": slots}, "limits": [limit("per_ip", "*", 1.0, 5)]})
    env = Envoy(front_yaml(port, origin_port, verifier_port, wasm_filter(CG_WASM, cfg)),
                2, tmp, name)
    try:
        wrk(f"http://127.0.0.1:{port}/", UA_CHROME, 1, 4)
        return env.rss_kib()
    finally:
        env.stop()


def memory(tmp, requests=1_000_000):
    """Envoy RSS before/after `requests` requests from distinct client addresses, at the
    default `store.slots`; the share of decisions the per-worker fallback made; and the
    memory one slot costs (idle RSS at the default slot count minus at 1,024 slots)."""
    origin_port, verifier_port = free_port(), free_port()
    upstream = Envoy(upstream_yaml(origin_port, verifier_port), 1, tmp, "upstream-mem")
    script = os.path.join(tmp, "xff.lua")
    with open(script, "w") as f:
        f.write(XFF_LUA)
    try:
        # The default slot count, as the filter reports it at load ("N bucket slots").
        slots = DEFAULT_SLOTS
        small = 1024
        idle_small = idle_rss_kib(tmp, origin_port, verifier_port, small, "mem-small")
        idle_default = idle_rss_kib(tmp, origin_port, verifier_port, slots, "mem-default")
        port = free_port()
        cfg = json.dumps({"client_ip": {"source": "xff", "xff_trusted_hops": 1},
                          "limits": [limit("per_ip", "*", 1.0, 5)]})
        env = Envoy(front_yaml(port, origin_port, verifier_port, wasm_filter(CG_WASM, cfg)),
                    2, tmp, "mem")
        try:
            url = f"http://127.0.0.1:{port}/"
            wrk(url, UA_CHROME, 2, 16, script=script)
            before = env.rss_kib()
            st0 = env.stats()
            sent = 0
            t0 = time.time()
            while sent < requests:
                res = wrk(url, UA_CHROME, 10, 32, script=script)
                sent += res["requests"]
            seconds = time.time() - t0
            after = env.rss_kib()
            st = env.stats()

            def delta(k):
                return st.get(k, 0) - st0.get(k, 0)
            decided = sum(delta(f"wasmcustom.crawlguard.class.human.{d}")
                          for d in ("allowed", "limited"))
            fallback = delta("wasmcustom.crawlguard.class.human.fail_open")
            per_slot = (idle_default - idle_small) * 1024 / (slots - small)
            row = {"requests": sent, "seconds": round(seconds, 1),
                   "rps": round(sent / seconds),
                   "rss_before_kib": before, "rss_after_kib": after,
                   "growth_kib": after - before, "slots": slots,
                   "idle_small_kib": idle_small, "idle_default_kib": idle_default,
                   "bytes_per_slot": round(per_slot),
                   # README's bound: the slots (pre-created at start, so not growth) plus
                   # what the workers' fallback maps may fill, 2 workers x 10,000 buckets x
                   # ~100 bytes; growth beyond it would mean memory that follows clients.
                   "bound_kib": 2 * 10_000 * 100 // 1024 + 1024,
                   "decided": decided, "fallback": fallback,
                   "fallback_pct": 100.0 * fallback / max(decided, 1),
                   "collisions": delta("wasmcustom.crawlguard.store.collision")}
            print(f"  memory: {row}", flush=True)
            return row
        finally:
            env.stop()
    finally:
        upstream.stop()


SOAK_LUA = """
-- Steady mixed load: browsers, a (fake-)verified Googlebot, scripts, spoofed crawler claims,
-- from a pool of client addresses (x-forwarded-for), over a few paths incl. robots.txt.
local uas = {
  "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
  "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_4) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
  "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
  "curl/8.5.0",
  "python-requests/2.31.0",
  "Mozilla/5.0 (compatible; GPTBot/1.2; +https://openai.com/gptbot)",
}
local paths = {"/", "/a/page", "/api/items?id=7", "/robots.txt", "/sitemap.xml", "/img/x.png"}
local n = 0
function request()
  n = n + 1
  local ua = uas[(n % #uas) + 1]
  local ip = "127.0.0.1"
  if ua:find("Googlebot") == nil then
    local v = (n * 7919) % 5000
    ip = string.format("127.1.%d.%d", math.floor(v / 250) % 256, v % 250 + 1)
  end
  return wrk.format("GET", paths[(n % #paths) + 1], {["User-Agent"] = ua, ["X-Forwarded-For"] = ip})
end
"""


def soak(tmp, seconds, out_path):
    """`make soak`: steady mixed load for `seconds`; 0 errors and flat RSS expected."""
    origin_port, verifier_port = free_port(), free_port()
    upstream = Envoy(upstream_yaml(origin_port, verifier_port), 1, tmp, "upstream-soak")
    script = os.path.join(tmp, "soak.lua")
    with open(script, "w") as f:
        f.write(SOAK_LUA)
    try:
        port = free_port()
        cfg = json.dumps({"client_ip": {"source": "xff", "xff_trusted_hops": 1}})
        env = Envoy(front_yaml(port, origin_port, verifier_port, wasm_filter(CG_WASM, cfg)),
                    2, tmp, "soak")
        try:
            url = f"http://127.0.0.1:{port}/"
            wrk(url, UA_CHROME, 5, 16, script=script)  # warm-up
            samples = [(0, env.rss_kib())]
            t0 = time.time()
            requests = 0
            socket_errors = 0
            while time.time() - t0 < seconds:
                chunk = min(30, max(1, int(seconds - (time.time() - t0))))
                res = wrk(url, UA_CHROME, chunk, 16, script=script)
                requests += res["requests"]
                samples.append((round(time.time() - t0), env.rss_kib()))
                print(f"  soak t={samples[-1][0]}s rss={samples[-1][1]} KiB "
                      f"requests={requests}", flush=True)
            st = env.stats()
            fivexx = st.get("http.main.downstream_rq_5xx", 0)
            rss = [r for _, r in samples]
            # Envoy's own counters, warm-up included, so the columns add up.
            requests = st.get("http.main.downstream_rq_total", requests)
            row = {"seconds": seconds, "requests": requests, "downstream_5xx": fivexx,
                   "rss_start_kib": rss[0], "rss_end_kib": rss[-1],
                   "rss_max_kib": max(rss), "samples": samples,
                   "limited": sum(v for k, v in st.items() if k.endswith(".limited")
                                  and "class" in k),
                   "fail_open": sum(v for k, v in st.items() if k.endswith(".fail_open"))}
        finally:
            env.stop()
    finally:
        upstream.stop()
    lines = ["", f"## Soak ({datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')})",
             "", f"`make soak`: {seconds} s of steady mixed load (browsers, verified Googlebot, "
             "scripts, GPTBot claims; 5,000 client addresses via x-forwarded-for; 6 paths incl. "
             "robots.txt), wrk 2 threads x 16 connections, Envoy concurrency 2, default limits.", "",
             "| requests (incl. 5 s warm-up) | 5xx | rejections (429) | fail_open | RSS start | RSS end | RSS max |",
             "|---|---|---|---|---|---|---|",
             f"| {row['requests']} | {row['downstream_5xx']} | {row['limited']} | "
             f"{row['fail_open']} | {row['rss_start_kib']} KiB | {row['rss_end_kib']} KiB | "
             f"{row['rss_max_kib']} KiB |", "",
             "RSS samples (s, KiB): " + ", ".join(f"{t}:{r}" for t, r in samples), ""]
    with open(out_path, "a") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return row


VERIFIER_BIN = os.path.join(ROOT, "target/release/crawlguard-sidecar")

MISS_LUA = """
-- wrk.format with a header table replaces wrk.headers (the -H headers): merge them.
function with_xff(ip)
  local h = {}
  for k, v in pairs(wrk.headers) do h[k] = v end
  h["X-Forwarded-For"] = ip
  return h
end
-- Every request a GPTBot claim from a new address (x-forwarded-for): a verdict-cache miss,
-- so each one pauses for the callout to the sidecar (which answers from its range file).
local n = 0
local base = 0
function setup(thread)
  thread:set("base", base)
  base = base + 4000000
end
function request()
  n = n + 1
  local v = base + n
  local ip = string.format("127.%d.%d.%d", math.floor(v / 65536) % 256, math.floor(v / 256) % 256, v % 256 + 0)
  return wrk.format("GET", "/", with_xff(ip))
end
"""


def verifier_latency(tmp, duration):
    """Sidecar latency on cache hits, and the filter's added latency on verdict misses."""
    if not os.path.exists(VERIFIER_BIN):
        print("  (no release sidecar: run `make build-sidecar`)")
        return None
    ranges = os.path.join(tmp, "loopback-ranges.json")
    with open(ranges, "w") as f:
        json.dump({"creationTime": "2026-11-30T00:00:00", "prefixes": [{"ipv4Prefix": "127.0.0.0/8"}]}, f)
    conf = os.path.join(tmp, "verifier.toml")
    with open(conf, "w") as f:
        f.write(f'[[bots]]\nid = "gptbot"\nranges = ["{ranges}"]\n')
    vport = free_port()
    cmd = [VERIFIER_BIN, "--listen", f"127.0.0.1:{vport}", "--config", conf, "--log-level", "warn"]
    COMMANDS.append(" ".join(cmd))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"verifier did not start: {line!r}")
        hit_url = f"http://127.0.0.1:{vport}/v1/verify?ip=127.0.0.1&bot=gptbot"
        http_get(hit_url)
        hits = wrk(hit_url, "bench", duration, 16)
        origin_port = free_port()
        upstream = Envoy(upstream_yaml(origin_port, free_port()), 1, tmp, "upstream-verify")
        script = os.path.join(tmp, "miss.lua")
        with open(script, "w") as f:
            f.write(MISS_LUA)
        ua_gptbot = "Mozilla/5.0 (compatible; GPTBot/1.2; +https://openai.com/gptbot)"
        try:
            rows = {}
            for name, use_script in (("warm (one address)", False), ("miss (new address each)", True)):
                port = free_port()
                cfg = json.dumps({"client_ip": {"source": "xff", "xff_trusted_hops": 1},
                                  "verifier": {"timeout_ms": 500},
                                  "limits": [limit("t", "*", BIG, BIG, "global")]})
                env = Envoy(front_yaml(port, origin_port, vport, wasm_filter(CG_WASM, cfg)),
                            1, tmp, "verify-" + ("miss" if use_script else "warm"))
                try:
                    url = f"http://127.0.0.1:{port}/"
                    wrk(url, ua_gptbot, 1, 4, script=script if use_script else None)
                    res = wrk(url, ua_gptbot, duration, 4, script=script if use_script else None)
                    st = env.stats()
                    res["verified"] = st.get("wasmcustom.crawlguard.verify.verified", 0)
                    res["errors"] = st.get("wasmcustom.crawlguard.verify.error", 0)
                    res["misses"] = st.get("wasmcustom.crawlguard.verify.cache_miss", 0)
                    rows[name] = res
                finally:
                    env.stop()
        finally:
            upstream.stop()
        print(f"  verifier hits: {hits}; filter: {rows}", flush=True)
        return {"hits": hits, "filter": rows}
    finally:
        proc.terminate()
        proc.wait()


CLI_BIN = os.path.join(ROOT, "target/release/crawlguard")
APACHE_LOG = os.path.join(ROOT, "../shared/data/elastic-apache-logs/apache_logs")
CLI_SECTION = "## crawlguard CLI throughput"


def cli_throughput(tmp, copies=100, runs=3):
    """`crawlguard report` and `replay` (embedded default configuration) on the shared
    Apache log repeated `copies` times (each copy shifted by a year, so time moves forward):
    lines per second of wall time and of CPU time, best of `runs`. The command is single
    threaded, so this is one core."""
    sh(["cargo", "build", "-q", "--release", "-p", "crawlguard-cli"], cwd=ROOT)
    with open(APACHE_LOG, "rb") as f:
        lines = f.read().splitlines(True)
    big = os.path.join(tmp, "apache_logs.x%d" % copies)
    with open(big, "wb") as f:
        for k in range(copies):
            year = b"/%d:" % (2015 + k)
            for line in lines:
                f.write(line.replace(b"/2015:", year, 1))
    n = len(lines) * copies
    cfg = os.path.join(tmp, "default.json")
    with open(cfg, "w") as f:
        f.write("")
    rows = []
    for name, cmd in [("report", [CLI_BIN, "report", big]),
                      ("replay", [CLI_BIN, "replay", "--config", cfg, big])]:
        best_wall, best_cpu = None, None
        for _ in range(runs):
            before = os.times()
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - t0
            after = os.times()
            cpu = (after.children_user - before.children_user) + \
                (after.children_system - before.children_system)
            best_wall = wall if best_wall is None else min(best_wall, wall)
            best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
        COMMANDS.append(" ".join(cmd).replace(tmp, "$TMP"))
        rows.append({"command": name, "lines": n, "wall_s": best_wall, "cpu_s": best_cpu,
                     "lines_per_s_wall": n / best_wall, "lines_per_s_cpu": n / best_cpu})
        print(f"  {name}: {n / best_wall:,.0f} lines/s wall, {n / best_cpu:,.0f} lines/s CPU",
              flush=True)
    return rows


def cli_lines(rows):
    out = [CLI_SECTION, "",
           f"`crawlguard report` and `crawlguard replay --config <empty: embedded default>` on "
           f"{rows[0]['lines']:,} lines (the shared Apache log, 10,000 lines, repeated with each "
           "copy a year later), single-threaded; best of 3; target >= 500,000 lines/s:", "",
           "| command | lines | wall s | lines/s (wall) | CPU s | lines/s (CPU) | >= 500k |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        ok = "yes" if r["lines_per_s_wall"] >= 500_000 else "NO"
        out.append(f"| {r['command']} | {r['lines']:,} | {r['wall_s']:.2f} | "
                   f"{r['lines_per_s_wall']:,.0f} | {r['cpu_s']:.2f} | "
                   f"{r['lines_per_s_cpu']:,.0f} | {ok} |")
    return out


IN_FLIGHT_SECTION = "## Requests in flight on the allow path (issue 23)"


def in_flight_lines(results):
    """The cost of a concurrency limit on the allow path: cg_allow against cg_in_flight (the
    same with `max_in_flight` 10,000 per address), medians of the rounds, and the shared-data
    calls per request the host tests pin (`tests/in_flight.rs`)."""
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("rps", "cpu_us_per_req")}
           for k, v in results.items()}
    concs = sorted({c for c, n in results if n in ("cg_allow", "cg_in_flight")})
    out = [IN_FLIGHT_SECTION, "",
           "Target: at most one shared-data read and write per request where a concurrency "
           "limit matches, none where none does. A request under a limit with "
           "`max_in_flight` takes its place in the key's slot in one read and one "
           "compare-and-swap write (with the token, when the limit has a bucket); giving it "
           "back is one more read and write at the stream's end, or, while the key is far "
           "from its cap (at most half of `max_in_flight` in flight when this worker last "
           "admitted one), part of one write per key on the worker's next tick (at most "
           "`max_in_flight / 16`, 64, held back; a cap under 16 never holds one back). "
           "Shared-data calls per request, as `tests/in_flight.rs` pins them on the filter's "
           "own code:", "",
           "| request | at admission | at the stream's end | on the next tick |",
           "|---|---|---|---|",
           "| no concurrency limit matches (cg_allow's leased buckets aside) | 0 | 0 | 0 |",
           "| a limit with `max_in_flight` 8 (under 16) | 1 read + 1 write | 1 read + 1 write | 0 |",
           "| a limit with `max_in_flight` 30, key far from its cap | 1 read + 1 write | 0 | "
           "1 read + 1 write per key, for every give-back held back |",
           "| cg_in_flight (`max_in_flight` 10,000, 34 requests in one tick) | 1 read + 1 write "
           "| 0 | 1 read + 1 write for all 34 |", "",
           "Measured (Envoy CPU time per request and req/s, medians of the rounds; a 2-core "
           "machine shared with other work, so req/s moves by tens of percent between "
           "rounds):", "",
           "| configuration | " + " | ".join(f"c={c} req/s | c={c} us/req" for c in concs) + " |",
           "|---|" + "---|---|" * len(concs)]
    for name in ("cg_allow", "cg_in_flight"):
        cells = []
        for c in concs:
            m = med.get((c, name))
            cells += [f"{m['rps']:.0f}", f"{m['cpu_us_per_req']:.1f}"] if m else ["-", "-"]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    cells = []
    for c in concs:
        a, b = med.get((c, "cg_in_flight")), med.get((c, "cg_allow"))
        cells += ([f"{a['rps'] / b['rps']:.2f}", f"{a['cpu_us_per_req'] / b['cpu_us_per_req']:.2f}"]
                  if a and b and b["rps"] and b["cpu_us_per_req"] else ["-", "-"])
    out.append("| cg_in_flight / cg_allow | " + " | ".join(cells) + " |")
    checks = []
    for (c, name), runs in sorted(results.items()):
        if name != "cg_in_flight":
            continue
        st = runs[-1]["stats"]
        got = {k.replace("wasmcustom.", ""): v for k, v in st.items()
               if v and ("human.allowed" in k or "human.limited" in k)}
        checks.append(f"- c={c} cg_in_flight: non-2xx {runs[-1]['non2xx']}, {got}")
    out += ["", "Checks (last round): every request allowed, none limited:", ""] + checks
    return out


def replace_section(path, marker, section_lines, how):
    """Puts a section (starting with `marker`) into an existing results file, replacing an
    older one, before the commands."""
    text = open(path).read() if os.path.exists(path) else "# crawlguard benchmark results\n"
    start = text.find(marker)
    if start >= 0:
        nxt = text.find("\n## ", start + len(marker))
        end = text.find("\nCommands (as run", start) if nxt < 0 else nxt
        text = text[:start] + text[end + 1:] if end >= 0 else text[:start]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    section = "\n".join(section_lines) + f"\n\n(measured {stamp}, `{how}`)\n"
    cut = text.find("\nCommands (as run")
    text = text[:cut + 1] + section + "\n" + text[cut + 1:] if cut >= 0 else \
        text.rstrip("\n") + "\n\n" + section
    with open(path, "w") as f:
        f.write(text)


def preserved_section(path, marker):
    """The lines of section `marker` of the results file at `path` (up to the next section or
    the commands), or []."""
    text = open(path).read() if os.path.exists(path) else ""
    start = text.find(marker)
    if start < 0:
        return []
    ends = [e for e in (text.find("\n## ", start + len(marker)),
                        text.find("\nCommands (as run", start)) if e >= 0]
    return text[start:min(ends) if ends else len(text)].rstrip().splitlines()


def replace_cli_section(path, rows):
    """Puts the CLI table into an existing results file (replacing an older one)."""
    replace_section(path, CLI_SECTION, cli_lines(rows), "bench/bench.py --cli-only")


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    env_ver = subprocess.run([ENVOY, "--version"], capture_output=True, text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
            "envoy": env_ver.split("version:")[-1].strip(),
            "wrk": shutil.which("wrk"),
            "crawlguard.wasm bytes": os.path.getsize(CG_WASM),
            "ua_only.wasm bytes": os.path.getsize(FLOOR_WASM)}


def write_results(path, results, exact_rows, mem_row, args, ver=None, cli=None):
    results = dict(results)
    verify_s, verifications = results.pop("verify_s", (float("nan"), 0))
    med = {k: {m: statistics.median(r[m] for r in v)
               for m in ("rps", "p50_ms", "p99_ms", "cpu_us_per_req", "sidecar_cpu_us_per_req")}
           for k, v in results.items()}
    lines = ["# crawlguard benchmark results", "",
             f"Date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
             "", "Machine:", ""]
    for k, v in machine().items():
        lines.append(f"- {k}: {v}")
    lines += ["", f"Method: {args.rounds} rounds of {args.duration} s per configuration, "
              "configurations alternated (order reversed every other round), medians shown; "
              "wrk 2 threads, 16 connections per Envoy worker, browser UA (Googlebot for 6); "
              "upstream: a separate Envoy (concurrency 1) with a direct_response origin and a "
              "fake verifier.", ""]
    concs = sorted({c for c, _ in med})
    for c in concs:
        pin = next((r[0].get("pinning", "none") for (cc, _), r in results.items() if cc == c),
                   "none")
        lines.append(f"- Pinning at concurrency {c}: {pin}" + (
            "" if pin != "none" else " (on this machine full separation is impossible: "
            f"{os.cpu_count()} cores for {c} Envoy workers, wrk and the upstream)") + ".")
    if args.note:
        lines.append(f"- {args.note}")
    lines.append("")
    lines += ["| # | configuration | " + " | ".join(
        f"c={c} req/s | c={c} p50 ms | c={c} p99 ms" for c in concs) + " |",
        "|---|---|" + "---|---|---|" * len(concs)]
    for i, name in enumerate(CONFIGS, 1):
        cells = []
        for c in concs:
            m = med.get((c, name))
            cells += [f"{m['rps']:.0f}", f"{m['p50_ms']:.3f}", f"{m['p99_ms']:.3f}"] if m else ["-"] * 3
        lines.append(f"| {i} | {name} | " + " | ".join(cells) + " |")
    lines += ["", "Envoy CPU time per request (user + system from /proc over the measured "
              "window, medians; less sensitive than req/s to other work on the machine):", "",
              "| # | configuration | " + " | ".join(f"c={c} us/req" for c in concs) + " |",
              "|---|---|" + "---|" * len(concs)]
    for i, name in enumerate(CONFIGS, 1):
        cells = [f"{med[(c, name)]['cpu_us_per_req']:.1f}" if (c, name) in med else "-"
                 for c in concs]
        lines.append(f"| {i} | {name} | " + " | ".join(cells) + " |")
    lines += ["", "Ratios of median req/s (targets: 4/2 >= 0.85, 4/3 >= 0.90, 5/2 >= 1.0, "
              "6/4 >= 0.9, 7/4 and 8/4 >= 0.95, 9/4 >= 0.9; 10/4 has none, it is a "
              "measurement):", "",
              "| ratio | " + " | ".join(f"c={c}" for c in concs) + " |",
              "|---|" + "---|" * len(concs)]
    for a, b, label in [("cg_allow", "local_rl", "4/2 allow vs native local_ratelimit"),
                        ("cg_allow", "wasm_floor", "4/3 allow vs wasm floor"),
                        ("cg_reject", "local_rl", "5/2 reject vs native local_ratelimit"),
                        ("cg_verified", "cg_allow", "6/4 verified crawler vs allow"),
                        ("cg_shedding", "cg_allow", "7/4 shedding on (healthy) vs allow"),
                        ("cg_fleet", "cg_allow", "8/4 fleet mode vs allow"),
                        ("cg_signals", "cg_allow", "9/4 every browser signal vs allow"),
                        ("cg_signed", "cg_allow", "10/4 signed agent vs allow"),
                        ("cg_in_flight", "cg_allow", "11/4 a concurrency limit vs allow")]:
        cells = []
        for c in concs:
            x, y = med.get((c, a)), med.get((c, b))
            cells.append(f"{x['rps'] / y['rps']:.2f}" if x and y and y["rps"] else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    signed = [(c, med[(c, "cg_signed")]) for c in concs if (c, "cg_signed") in med]
    if signed:
        lines += ["", "A signed agent's request (10, cg_signed): Envoy's CPU per request (above) "
                  "and the sidecar's (its callout: HTTP, JSON, RFC 9421 parse, one ed25519 "
                  f"verification); the sidecar's mean ed25519 verification: "
                  f"{verify_s * 1e6:.1f} us over {verifications} verifications "
                  "(crawlguard_sidecar_signature_verify_seconds):", "",
                  "| Envoy concurrency | Envoy us/req | sidecar us/req | Envoy us/req, allow (4) |",
                  "|---|---|---|---|"]
        for c, m in signed:
            allow = med.get((c, "cg_allow"), {}).get("cpu_us_per_req", float("nan"))
            lines.append(f"| {c} | {m['cpu_us_per_req']:.1f} | "
                         f"{m['sidecar_cpu_us_per_req']:.1f} | {allow:.1f} |")
    fleet_rows = [(c, runs) for (c, name), runs in sorted(results.items()) if name == "cg_fleet"]
    if fleet_rows:
        lines += ["", "Fleet sync traffic per Envoy per second (cg_fleet, medians of the rounds' "
                  "measured windows; bytes are the crawlguard_fleet cluster's, HTTP included; every "
                  "root context syncs: each worker's and the one on Envoy's main thread):",
                  "", "| Envoy concurrency | syncs/s | keys/s | sync errors | tx bytes/s | "
                  "rx bytes/s |", "|---|---|---|---|---|---|"]
        for c, runs in fleet_rows:
            def per_s(key):
                return statistics.median(
                    sum(v for k, v in r["delta"].items() if k.endswith(key)) / r["seconds"]
                    for r in runs)
            lines.append(f"| {c} | {per_s('crawlguard.fleet.syncs'):.1f} | "
                         f"{per_s('crawlguard.fleet.keys_synced'):.1f} | "
                         f"{per_s('crawlguard.fleet.sync_error'):.1f} | "
                         f"{per_s('crawlguard_fleet.upstream_cx_tx_bytes_total'):.0f} | "
                         f"{per_s('crawlguard_fleet.upstream_cx_rx_bytes_total'):.0f} |")
    # Sanity of what was measured: rejects really rejected, verified really verified.
    lines += ["", "Checks on what was measured (last round's counters):", ""]
    for (c, name), runs in sorted(results.items()):
        st = runs[-1]["stats"]
        interesting = {k.replace("wasmcustom.", ""): v for k, v in st.items()
                       if v and ("allowed" in k or "limited" in k or "verify.verified" in k
                                 or "signature.verified" in k
                                 or "cache_hit" in k or "rate_limited" in k or "fleet." in k)}
        if interesting:
            lines.append(f"- c={c} {name}: non-2xx {runs[-1]['non2xx']}, {interesting}")
    if exact_rows:
        lines += ["", "Exactness: one global bucket (rate 20/s, burst 50), 32 clients, 10 s; "
                  "allowed must be within +-1 of burst + rate x t:", "",
                  "| Envoy concurrency | allowed | theory | limited | fail_open | within +-1 |",
                  "|---|---|---|---|---|---|"]
        for r in exact_rows:
            lines.append(f"| {r['concurrency']} | {r['allowed']} | {r['theory']} | "
                         f"{r['limited']} | {r['fail_open']} | {'yes' if r['ok'] else 'NO'} |")
    if mem_row:
        m = mem_row
        lines += ["", f"Memory: {m['requests']} requests in {m['seconds']} s ({m['rps']} req/s), "
                  "each from a new client address (127.x.y.z in x-forwarded-for, "
                  "client_ip.source = xff), one per-IP limit (1/s, burst 5: a client's bucket "
                  f"is full again 1 s after its request), default store.slots = {m['slots']}, "
                  "Envoy concurrency 2:", "",
                  "| RSS before | RSS after | growth | bound | decisions | by the per-worker fallback | slot collisions |",
                  "|---|---|---|---|---|---|---|",
                  f"| {m['rss_before_kib']} KiB | {m['rss_after_kib']} KiB | "
                  f"{m['growth_kib']} KiB | {m['bound_kib']} KiB | {m['decided']} | "
                  f"{m['fallback']} ({m['fallback_pct']:.2f}%) | {m['collisions']} |", "",
                  f"Memory per slot: idle RSS (concurrency 2, slots pre-created) {m['idle_default_kib']} KiB "
                  f"at {m['slots']} slots vs {m['idle_small_kib']} KiB at 1024: "
                  f"{m['bytes_per_slot']} bytes per slot."]
    def template(c):
        c = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", c)
        return re.sub(r"/tmp/cg-bench-[^/]+/", "$TMP/", c)
    if ver:
        h = ver["hits"]
        lines += ["", "Verifier: the sidecar alone on cache hits (wrk 16 connections on "
                  "/v1/verify), and the filter with a GPTBot claim (range-verified by the "
                  "sidecar), Envoy concurrency 1, 4 connections: warm verdict cache vs. a "
                  "cache miss on every request (timeout_ms 500):", "",
                  "| measurement | req/s | p50 ms | p99 ms | notes |", "|---|---|---|---|---|",
                  f"| sidecar, cache hit | {h['rps']:.0f} | {h['p50_ms']:.3f} | {h['p99_ms']:.3f} | |"]
        for name, r in ver["filter"].items():
            lines.append(f"| filter, {name} | {r['rps']:.0f} | {r['p50_ms']:.3f} | "
                         f"{r['p99_ms']:.3f} | misses {r['misses']}, verified {r['verified']}, "
                         f"errors {r['errors']} |")
    if ("cg_in_flight" in CONFIGS) and any(n == "cg_in_flight" for _, n in results):
        lines += [""] + in_flight_lines(results)
    if cli:
        lines += [""] + cli_lines(cli)
    # The instructions per request (bench/callgrind.py, run first by `make bench`) and its
    # regression baseline stay.
    kept = preserved_section(path, "## Instructions per request (callgrind)")
    if kept:
        lines += [""] + kept
    profile = os.path.join(ROOT, "bench/profile.md")
    if os.path.exists(profile):
        with open(profile) as f:
            lines += [""] + f.read().rstrip().splitlines()
    lines += ["", "Commands (as run; PORT = a free port, $TMP/*.yaml = the generated configs, "
              "see bench/bench.py):", "", "```"] + sorted({template(c) for c in COMMANDS}) + [
              "```", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="1 round of 3 s, no memory run")
    ap.add_argument("--note", default=os.environ.get("BENCH_NOTE", ""),
                    help="a line for results.md, e.g. that the machine was shared")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results.md"))
    ap.add_argument("--cli-only", action="store_true",
                    help="only the crawlguard command's log throughput, put into --out")
    ap.add_argument("--in-flight-only", action="store_true",
                    help="only cg_allow against cg_in_flight (issue 23), put into --out")
    ap.add_argument("--soak", type=int, metavar="SECONDS",
                    help="only the soak run, appended to --out")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.duration = 1, 3
    if args.cli_only:
        with tempfile.TemporaryDirectory(prefix="cg-bench-") as tmp:
            print("crawlguard CLI throughput:", flush=True)
            replace_cli_section(args.out, cli_throughput(tmp))
        return
    for tool in ("wrk",):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found: run `make bench` (it installs it)")
    sh(["cargo", "build", "-q", "--release", "--target", "wasm32-wasip1", "-p", "crawlguard",
        "--config", 'profile.release.opt-level="z"'],
       cwd=ROOT)
    # cargo puts its unoptimised module back on every build: the bench measures what
    # `make build` ships (wasm-opt -O3, scripts/optimize-wasm.sh).
    sh([os.path.join(ROOT, "scripts/optimize-wasm.sh"), CG_WASM], cwd=ROOT)
    sh(["cargo", "build", "-q", "--release", "--target", "wasm32-wasip1", "--manifest-path",
        "bench/ua-only/Cargo.toml", "--target-dir", "target/bench"], cwd=ROOT)
    with tempfile.TemporaryDirectory(prefix="cg-bench-") as tmp:
        if args.in_flight_only:
            print("requests in flight:", flush=True)
            subset = {n: CONFIGS[n] for n in ("cg_allow", "cg_in_flight")}
            results = throughput(tmp, args.rounds, args.duration, [1, 2], subset)
            lines = in_flight_lines(results)
            print("\n".join(lines))
            replace_section(args.out, IN_FLIGHT_SECTION, lines, "bench/bench.py --in-flight-only")
            return
        if args.soak:
            row = soak(tmp, args.soak, args.out)
            sys.exit(0 if row["downstream_5xx"] == 0 else 1)
        print("throughput:", flush=True)
        results = throughput(tmp, args.rounds, args.duration, [1, 2])
        print("exactness:", flush=True)
        exact_rows = exactness(tmp, [2, 4])
        mem_row = None if args.quick else memory(tmp)
        print("verifier:", flush=True)
        ver = verifier_latency(tmp, args.duration)
        print("crawlguard CLI throughput:", flush=True)
        cli = cli_throughput(tmp)
        write_results(args.out, results, exact_rows, mem_row, args, ver, cli)


if __name__ == "__main__":
    main()
