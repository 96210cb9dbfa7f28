#!/usr/bin/env bash
# The `tester` service of the docker-compose suite: waits for the stack, then checks the
# promises crawlguard makes on the wire, against the real Envoy + verifier + dnsmasq +
# test upstream. Each client IP is a 127.x.y.z address bound with `curl --interface`, so
# one container plays many clients. Prints one `ok`/`not ok` line per check and exits 1 if
# any check failed (docker compose --exit-code-from tester passes that on).
#
# Expectations follow crawlguard's embedded default configuration
# (envoy/crawlguard.default.json): script_per_ip burst 10 at 1/s, spoofed_per_ip burst 2,
# Retry-After ranges script 1..300 + 10 jitter, human 1..60 + 2, spoofed 60..3600 + 120.
#
# Crawler claims come from documentation addresses in X-Forwarded-For (the compose Envoy
# runs crawlguard with client_ip.source = "xff"; see dnsmasq.conf for why not 127.x): the
# TCP source is still a 127.x address, the address crawlguard keys and verifies is 192.0.2.x.
set -uo pipefail

: "${CG_ENVOY_PORT:?}" "${CG_ENVOY_ADMIN_PORT:?}" "${CG_UPSTREAM_PORT:?}" "${CG_VERIFIER_PORT:?}"
ENVOY="http://127.0.0.1:$CG_ENVOY_PORT"
ADMIN="http://127.0.0.1:$CG_ENVOY_ADMIN_PORT"
UPSTREAM="http://127.0.0.1:$CG_UPSTREAM_PORT"
VERIFIER="http://127.0.0.1:$CG_VERIFIER_PORT"
READY_TIMEOUT_S="${CG_READY_TIMEOUT_S:-90}"
SCRIPT_BURST="${CG_SCRIPT_BURST:-10}"

UA_CHROME='Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36'
UA_CURL='curl/8.5.0'
UA_GOOGLEBOT='Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)'

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
FAILED=0
PASSED=0

ok() { PASSED=$((PASSED + 1)); echo "ok - $*"; }
not_ok() { FAILED=$((FAILED + 1)); echo "not ok - $*"; }
# check DESCRIPTION COMMAND...: ok when the command succeeds.
check() {
    local what="$1"; shift
    if "$@"; then ok "$what"; else not_ok "$what"; fi
}
# expect DESCRIPTION 'SHELL CONDITION': ok when the condition (evaluated now) holds.
expect() {
    local what="$1"; shift
    if eval "$1"; then ok "$what"; else not_ok "$what"; fi
}

# req IP UA URL [curl args...]: one request from source address IP. Sets STATUS, and the
# files $TMP/h (headers) and $TMP/b (body).
req() {
    local ip="$1" ua="$2" url="$3"; shift 3
    STATUS="$(curl -sS --max-time 10 --interface "$ip" -A "$ua" -D "$TMP/h" -o "$TMP/b" \
        -w '%{http_code}' "$@" "$url" 2>"$TMP/e")" || STATUS="curl-error:$(tr '\n' ' ' <"$TMP/e")"
}
# hdr NAME: value of response header NAME of the last req (first one, CR stripped).
hdr() {
    grep -i "^$1:" "$TMP/h" | head -n1 | cut -d: -f2- | sed -e 's/^[[:space:]]*//' -e 's/\r$//'
}
hdr_count() { grep -ci "^$1:" "$TMP/h"; }
body_lines() { wc -l <"$TMP/b"; }
body_bytes() { wc -c <"$TMP/b"; }
# in_range VALUE MIN MAX: VALUE is delay-seconds (digits only) within [MIN, MAX].
in_range() { [[ "$1" =~ ^[0-9]+$ ]] && (("$1" >= $2 && "$1" <= $3)); }
# A crawlguard counter from Envoy's admin (without the `wasmcustom.` prefix); 0 if absent.
counter() {
    local v
    v="$(curl -sS --max-time 5 "$ADMIN/stats?filter=crawlguard" |
        awk -F': ' -v n="wasmcustom.$1" '$1 == n { print $2 }')"
    echo "${v:-0}"
}
# A rejection as crawlguard writes it: Retry-After within [MIN, MAX], no-store, a short
# one-line text/plain body.
clean_rejection() {
    local min="$1" max="$2" ra cc ct
    ra="$(hdr retry-after)"; cc="$(hdr cache-control)"; ct="$(hdr content-type)"
    in_range "$ra" "$min" "$max" && [ "$(hdr_count retry-after)" -eq 1 ] &&
        [ "$cc" = "no-store" ] && [[ "$ct" == text/plain* ]] &&
        [ "$(body_lines)" -le 1 ] && [ "$(body_bytes)" -le 120 ] &&
        ! grep -qi '^x-robots-tag:' "$TMP/h" && ! grep -qi '^location:' "$TMP/h" || {
        echo "#   status=$STATUS retry-after='$ra' cache-control='$cc' content-type='$ct'" \
            "body=$(body_bytes) bytes, $(body_lines) lines"
        return 1
    }
}

wait_for() {
    local what="$1" url="$2" expect="$3" deadline=$((SECONDS + READY_TIMEOUT_S)) got=""
    while ((SECONDS < deadline)); do
        got="$(curl -s --max-time 2 "$url" 2>/dev/null || true)"
        if [[ "$got" == *"$expect"* ]]; then echo "# $what is ready"; return 0; fi
        sleep 0.2
    done
    echo "# $what not ready after ${READY_TIMEOUT_S}s (last answer: ${got:0:200})"
    return 1
}

echo "# waiting for the stack (envoy :$CG_ENVOY_PORT admin :$CG_ENVOY_ADMIN_PORT," \
    "upstream :$CG_UPSTREAM_PORT, verifier :$CG_VERIFIER_PORT, dns :${CG_DNS_PORT:-?})"
ready=1
wait_for upstream "$UPSTREAM/__upstream/requests" "[" || ready=0
wait_for verifier "$VERIFIER/healthz" "" || ready=0
wait_for envoy "$ADMIN/ready" "LIVE" || ready=0
if [ "$ready" -ne 1 ]; then
    not_ok "stack ready within ${READY_TIMEOUT_S}s"
    exit 1
fi
ok "stack ready"

# --- dns + verifier, directly (an address the filter scenarios do not use) ---
verdict() { curl -sS --max-time 5 "$VERIFIER/v1/verify?ip=$1&bot=googlebot"; }
v="$(verdict 192.0.2.8)"
echo "#   $v"
expect "verifier: 192.0.2.8 (PTR crawl-192-0-2-8.googlebot.com, A back) is verified by fcrdns" \
    'grep -q "\"verdict\":\"verified\",\"method\":\"fcrdns\",\"host\":\"crawl-192-0-2-8.googlebot.com\"" <<<"$v"'
v="$(verdict 192.0.2.9)"
echo "#   $v"
expect "verifier: 192.0.2.9 (no PTR) is spoofed" 'grep -q "\"verdict\":\"spoofed\"" <<<"$v"'


# --- 1. a browser: 200, the upstream saw x-crawler-class: human (a forged value removed) ---
req 127.0.0.10 "$UA_CHROME" "$ENVOY/compose/browser" -H 'x-crawler-class: search_crawler'
check "browser: 200 (got $STATUS)" [ "$STATUS" = 200 ]
check "browser: upstream saw x-crawler-class human (echo: '$(hdr x-upstream-saw-class)')" \
    [ "$(hdr x-upstream-saw-class)" = human ]
log="$(curl -sS --max-time 5 "$UPSTREAM/__upstream/requests")"
check "browser: the upstream's request log has exactly one x-crawler-class, human" \
    grep -Eq '"headers":\{[^}]*"x-crawler-class":\["human"\][^}]*\},"method":"GET","path":"/compose/browser"' <<<"$log"

# --- 2. a curl flood from one IP: the burst passes, then 429 with a valid Retry-After ---
flood_ip=127.0.0.20
statuses=()
rejections_clean=1
flood_start=$(date +%s%N)
for i in $(seq 1 $((SCRIPT_BURST + 15))); do
    req "$flood_ip" "$UA_CURL" "$ENVOY/compose/flood"
    statuses+=("$STATUS")
    if [ "$STATUS" = 429 ] && ! clean_rejection 1 310; then rejections_clean=0; fi
done
flood_ms=$((($(date +%s%N) - flood_start) / 1000000))
echo "# flood statuses (${flood_ms} ms): ${statuses[*]}"
n200=0; n429=0; other=0; burst_ok=1
for i in "${!statuses[@]}"; do
    case "${statuses[$i]}" in
        200) n200=$((n200 + 1)) ;;
        429) n429=$((n429 + 1)); [ "$i" -ge "$SCRIPT_BURST" ] || burst_ok=0 ;;
        *) other=$((other + 1)) ;;
    esac
done
# The bucket (burst 10) refills at 1 token/s while the flood runs: at most one more 200 per
# started second of flood.
max200=$((SCRIPT_BURST + 1 + flood_ms / 1000))
expect "flood: the first $SCRIPT_BURST requests pass, the rest 429 but for refills" \
    "[ $burst_ok -eq 1 ] && [ $other -eq 0 ] && [ $n200 -le $max200 ] && [ $n429 -ge $((SCRIPT_BURST + 15 - max200)) ]"
echo "#   $n200 x 200 (at most $max200), $n429 x 429"
expect "flood: every 429 has Retry-After in 1..310, no-store, a one-line text body" \
    '[ "$rejections_clean" -eq 1 ] && [ "$n429" -gt 0 ]'
req "$flood_ip" "$UA_CURL" "$ENVOY/robots.txt"
check "flood: /robots.txt is still 200 for the throttled IP (got $STATUS)" [ "$STATUS" = 200 ]
# Many other client IPs, each with its own bucket, are unaffected by the flood.
others_ok=1
for a in 21 22 23 24 25; do
    for b in 1 2 3 4; do
        ip="127.0.$a.$b"
        req "$ip" "$UA_CURL" "$ENVOY/compose/other"
        if [ "$STATUS" != 200 ]; then others_ok=0; echo "#   $ip got $STATUS"; fi
    done
done
for ip in 127.1.2.3 127.200.100.50 127.255.255.254; do
    req "$ip" "$UA_CURL" "$ENVOY/compose/other"
    if [ "$STATUS" != 200 ]; then others_ok=0; echo "#   $ip got $STATUS"; fi
done
check "flood: 23 other client IPs (127.0.21.1 .. 127.255.255.254) still get 200" [ "$others_ok" -eq 1 ]
check "stats: crawlguard.class.script.limited >= 14" [ "$(counter crawlguard.class.script.limited)" -ge 14 ]

# --- 3. a verified Googlebot: PTR + A via dns and the verifier -> search_crawler ---
verified_before="$(counter crawlguard.verify.verified)"
req 127.0.0.7 "$UA_GOOGLEBOT" "$ENVOY/compose/googlebot" -H 'x-forwarded-for: 192.0.2.7'
check "googlebot 192.0.2.7 (from 127.0.0.7): 200 on the first request (got $STATUS)" [ "$STATUS" = 200 ]
check "googlebot 192.0.2.7: upstream saw search_crawler (echo: '$(hdr x-upstream-saw-class)')" \
    [ "$(hdr x-upstream-saw-class)" = search_crawler ]
req 127.0.0.7 "$UA_GOOGLEBOT" "$ENVOY/compose/googlebot" -H 'x-forwarded-for: 192.0.2.7'
expect "googlebot 192.0.2.7: second request search_crawler from the verdict cache" \
    '[ "$STATUS" = 200 ] && [ "$(hdr x-upstream-saw-class)" = search_crawler ]'
verified="$(counter crawlguard.verify.verified)"
check "stats: wasmcustom.crawlguard.verify.verified >= 1 (was $verified_before, now $verified)" \
    [ "$verified" -ge 1 ]
check "stats: wasmcustom.crawlguard.verify.cache_hit >= 1" \
    [ "$(counter crawlguard.verify.cache_hit)" -ge 1 ]

# --- 4. Googlebot UA from addresses whose PTR is not Google's -> spoofed ---
for case in "66:PTR in example.net" "67:PTR in googlebot.com, A elsewhere" "68:no PTR"; do
    n="${case%%:*}"; why="${case#*:}"; ip="192.0.2.$n"
    req "127.0.0.$n" "$UA_GOOGLEBOT" "$ENVOY/compose/spoofed" -H "x-forwarded-for: $ip"
    expect "spoofed $ip ($why): upstream saw spoofed (status $STATUS, echo '$(hdr x-upstream-saw-class)')" \
        '[ "$STATUS" = 200 ] && [ "$(hdr x-upstream-saw-class)" = spoofed ]'
done
# spoofed_per_ip: burst 2 -> the third request from 192.0.2.66 is rejected, long Retry-After.
req 127.0.0.66 "$UA_GOOGLEBOT" "$ENVOY/compose/spoofed" -H 'x-forwarded-for: 192.0.2.66'
req 127.0.0.66 "$UA_GOOGLEBOT" "$ENVOY/compose/spoofed" -H 'x-forwarded-for: 192.0.2.66'
check "spoofed 192.0.2.66: third request 429 (got $STATUS)" [ "$STATUS" = 429 ]
check "spoofed 192.0.2.66: Retry-After in 60..3720, no-store, one-line body" clean_rejection 60 3720
check "stats: wasmcustom.crawlguard.verify.spoofed >= 3" \
    [ "$(counter crawlguard.verify.spoofed)" -ge 3 ]
check "stats: wasmcustom.crawlguard.class.search_crawler.allowed >= 2" \
    [ "$(counter crawlguard.class.search_crawler.allowed)" -ge 2 ]

# --- 5. upstream errors come out normalised ---
req 127.0.0.30 "$UA_CHROME" \
    "$ENVOY/compose/error?status=503&header=cache-control:public,%20max-age=600&header=etag:%22v1%22&body=%3Chtml%3E%0A%3Cmeta%20name=robots%20content=noindex%3E%0Aupstream%20down%0A%3C/html%3E%0A"
check "upstream 503: still 503 (got $STATUS)" [ "$STATUS" = 503 ]
check "upstream 503: Retry-After added (1..62), cache-control no-store, one-line text body" \
    clean_rejection 1 62
check "upstream 503: etag dropped" [ "$(hdr_count etag)" -eq 0 ]
expect "upstream 503: body is not the upstream's HTML" '! grep -qi "<html\|noindex" "$TMP/b"'
req 127.0.0.31 "$UA_CHROME" \
    "$ENVOY/compose/error?status=429&header=retry-after:Wed,%2021%20Oct%202099%2007:28:00%20GMT"
check "upstream 429 with an HTTP-date: Retry-After in seconds, clamped to 1..62 (got $(hdr retry-after))" \
    clean_rejection 1 62
check "stats: wasmcustom.crawlguard.rewrite.status_503 >= 1" \
    [ "$(counter crawlguard.rewrite.status_503)" -ge 1 ]

echo "# $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
