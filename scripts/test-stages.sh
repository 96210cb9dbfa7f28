#!/usr/bin/env bash
# `make test`'s stages, each run even after an earlier one failed, so one failure never hides
# the others: host tests of the workspace, the real-Envoy suites, the bounded fuzz run, the
# docker-compose suite. Ends with one line per stage (passed / failed, seconds) and the
# closing line `N passed, N failed` (stages); exits 1 if any stage failed.
#
#   scripts/test-stages.sh                   every stage
#   TEST_STAGES="host envoy" scripts/test-stages.sh   some of them (names as in the summary)
#
# Environment: CARGO (default cargo), TEST_THREADS (real-Envoy tests at once, default 2),
# FUZZ_SECONDS (per fuzz target, default 10). Expects `make setup build` to have run (the
# Makefile's `test` target does).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CARGO="${CARGO:-cargo}"
TEST_THREADS="${TEST_THREADS:-2}"
FUZZ_SECONDS="${FUZZ_SECONDS:-10}"
STAGES="${TEST_STAGES:-host envoy fuzz compose}"

stage_cmd() {
    case "$1" in
        host) $CARGO test --workspace --exclude crawlguard-integration --no-fail-fast ;;
        envoy) $CARGO test -p crawlguard-integration --no-fail-fast -- --test-threads="$TEST_THREADS" ;;
        fuzz) scripts/fuzz.sh "$FUZZ_SECONDS" ;;
        compose) CARGO="$CARGO" CG_PROFILE=debug scripts/compose-test.sh ;;
        *) echo "test-stages: unknown stage '$1' (host, envoy, fuzz, compose)" >&2; return 2 ;;
    esac
}

describe() {
    case "$1" in
        host) echo "host tests (unit, property, real data)" ;;
        envoy) echo "real-Envoy suites" ;;
        fuzz) echo "fuzz (${FUZZ_SECONDS} s per target)" ;;
        compose) echo "docker-compose suite" ;;
        *) echo "$1" ;;
    esac
}

passed=0
failed=0
summary=()
for s in $STAGES; do
    echo "=== stage $s: $(describe "$s")"
    t0=$(date +%s)
    stage_cmd "$s"
    rc=$?
    secs=$(($(date +%s) - t0))
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        summary+=("$(printf 'stage %-8s passed  %5d s  %s' "$s" "$secs" "$(describe "$s")")")
    else
        failed=$((failed + 1))
        summary+=("$(printf 'stage %-8s FAILED  %5d s  %s (exit %d)' "$s" "$secs" "$(describe "$s")" "$rc")")
    fi
done

echo
echo "=== make test: stages"
for line in "${summary[@]}"; do
    echo "$line"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
