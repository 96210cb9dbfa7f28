#!/usr/bin/env bash
# Shrinks the filter module in place with binaryen's `wasm-opt -O3` and refuses a module of
# 600,000 bytes or more (issue 11's promise; raised for issues 20 and 23, and back to it once
# the configuration parser lost its path tracker and the module was built at opt-level "z":
# bench/results.md).
# Idempotent and cheap when nothing changed: the optimised copy of a module is kept next to
# it and reused while cargo's output is the same.
#
#   scripts/optimize-wasm.sh [MODULE]    default target/wasm32-wasip1/release/crawlguard.wasm
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WASM="${1:-$ROOT/target/wasm32-wasip1/release/crawlguard.wasm}"
# The last optimised module and the sha256 of the module it was made from: cargo puts its
# own (unoptimised) copy back on every `cargo build`, even a no-op one.
CACHE="$WASM.opt"
CACHE_SRC="$WASM.opt.src-sha256"
MAX_BYTES=600000
# The wasm features rustc (1.8x+) emits for wasm32-wasip1 by default; binaryen must accept
# each or it refuses the module.
FEATURES=(--enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int
          --enable-mutable-globals --enable-multivalue --enable-reference-types)

log() { echo "optimize-wasm: $*" >&2; }

[ -f "$WASM" ] || { log "$WASM not found: build it first"; exit 1; }
if ! command -v wasm-opt >/dev/null 2>&1; then
    log "wasm-opt not found: run scripts/setup.sh --rust (installs binaryen)"; exit 1
fi
sha=$(sha256sum "$WASM" | cut -d' ' -f1)
if [ -f "$CACHE" ] && [ "$sha" = "$(sha256sum "$CACHE" | cut -d' ' -f1)" ]; then
    : # already the optimised module
elif [ -f "$CACHE" ] && [ -f "$CACHE_SRC" ] && [ "$sha" = "$(cat "$CACHE_SRC")" ]; then
    # cargo put the same unoptimised module back: reuse the optimised one (a new file, so
    # cargo's hard-linked copy in deps/ stays as cargo made it)
    cp "$CACHE" "$WASM.opt.tmp" && mv "$WASM.opt.tmp" "$WASM"
else
    before=$(stat -c %s "$WASM")
    wasm-opt -O3 "${FEATURES[@]}" "$WASM" -o "$WASM.opt.tmp"
    cp "$WASM.opt.tmp" "$CACHE"
    echo "$sha" >"$CACHE_SRC"
    mv "$WASM.opt.tmp" "$WASM"
    log "$(basename "$WASM"): $before -> $(stat -c %s "$WASM") bytes (wasm-opt -O3)"
fi
size=$(stat -c %s "$WASM")
if [ "$size" -ge "$MAX_BYTES" ]; then
    log "$(basename "$WASM") is $size bytes, the limit is < $MAX_BYTES"; exit 1
fi
