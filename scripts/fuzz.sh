#!/usr/bin/env bash
# Bounded fuzzing of every parser and encoder the filter owns (fuzz/: cargo-fuzz + libFuzzer):
# classify, client_ip, config_parse, verifier_response, retry_after, slot_decode, fleet_answer.
#
#   scripts/fuzz.sh [SECONDS]    runs each target for SECONDS (default 20) from its checked-in
#                                seed corpus fuzz/corpus/<target>/; exits non-zero on any crash
#
# Longer runs (documented; not part of `make test`):
#   scripts/fuzz.sh 3600                               # one hour per target (~6 h in all)
#   FUZZ_TARGETS="config_parse classify" scripts/fuzz.sh 1800
#   FUZZ_SANITIZER=address scripts/fuzz.sh 600         # with AddressSanitizer (about 2x slower)
#
# Inputs that reach new code go to fuzz/work/<target>/ (git-ignored, kept between runs so a
# later run starts from them); copy the interesting ones into fuzz/corpus/<target>/. A crash
# leaves its input in fuzz/artifacts/<target>/; reproduce it with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir fuzz -s none <target> fuzz/artifacts/<target>/crash-...
#
# Only a stable toolchain is available here: cargo-fuzz passes nightly-only flags to rustc,
# which RUSTC_BOOTSTRAP=1 lets the stable compiler accept. The sanitizer defaults to `none`:
# the filter is safe Rust, the point is panics and wrong answers, and no sanitizer doubles the
# executions per second. Installs cargo-fuzz from crates.io if it is missing (idempotent).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SECS="${1:-20}"
SANITIZER="${FUZZ_SANITIZER:-none}"
TARGETS="${FUZZ_TARGETS:-classify client_ip config_parse verifier_response retry_after slot_decode fleet_answer}"
CARGO_FUZZ_VERSION="0.13.2"
export RUSTC_BOOTSTRAP=1

if ! [[ "$SECS" =~ ^[0-9]+$ ]] || [ "$SECS" -lt 1 ]; then
    echo "usage: $0 [SECONDS]  (a whole number of seconds per target, >= 1)" >&2
    exit 2
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

start=$(date +%s)
echo "fuzz: building targets (sanitizer: $SANITIZER)"
mkdir -p fuzz/work
if ! cargo fuzz build --fuzz-dir fuzz -s "$SANITIZER" >fuzz/work/build.log 2>&1; then
    tail -n 40 fuzz/work/build.log >&2
    echo "fuzz: build failed (full log: fuzz/work/build.log)" >&2
    exit 1
fi
built=$(date +%s)

failed=()
for t in $TARGETS; do
    case "$t" in
        classify) max_len=70000 ;;   # the seed corpus holds a 64 KiB User-Agent
        config_parse) max_len=16384 ;;
        *) max_len=4096 ;;
    esac
    mkdir -p "fuzz/work/$t"
    log="fuzz/work/$t.log"
    echo "fuzz: $t for ${SECS}s"
    if cargo fuzz run --fuzz-dir fuzz -s "$SANITIZER" "$t" "fuzz/work/$t" "fuzz/corpus/$t" -- \
        -max_total_time="$SECS" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"$log" 2>&1; then
        runs=$(grep -m1 -o 'Done [0-9]* runs in [0-9]* second' "$log" || true)
        echo "fuzz: $t ok (${runs:-no summary})"
    else
        failed+=("$t")
        echo "fuzz: $t FAILED; last lines of $log:" >&2
        grep -E 'panicked at|ERROR: libFuzzer|SUMMARY|Test unit written|Base64' "$log" >&2 || tail -n 30 "$log" >&2
    fi
done
end=$(date +%s)

echo "fuzz: build $((built - start))s, fuzzing $((end - built))s, total $((end - start))s"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz: ${#failed[@]} target(s) crashed: ${failed[*]}" >&2
    exit 1
fi
echo "fuzz: all targets ran ${SECS}s without a crash"
