//! A penalty belongs to the client that ignored its Retry-After, the client address and the
//! class, through a real Envoy: it never lands on a shared "missing" header key, on a
//! header value another client can name, or on another class at the same address (a
//! NAT-mate), and a verified crawler never serves one.
//!
//! Scripts escalate after one ignored Retry-After with a factor of 100: the first penalty is
//! 100 s. Buckets hold 1 token and refill one every 10 s, so a flood of a few requests is
//! rejected after its first whatever the machine's load, and a client that serves no
//! penalty is admitted again within 10 s: each test waits for that refill by polling with a
//! 30 s deadline, inside the 100 s a misplaced penalty would last.

use std::time::Duration;

use crawlguard_integration::{
    client, get, ip, poll_until, Envoy, EnvoyOpts, TestUpstream, UA_CHROME, UA_CURL, UA_GOOGLEBOT,
};
use serde_json::{json, Value};

/// One limit for every class keyed by `key`, burst 1 at 0.1/s; scripts escalate at once.
fn config(key: &str) -> Value {
    json!({
        "classes": {
            "script": {
                "retry_after": {"min_s": 1, "max_s": 1, "jitter_s": 0},
                "escalation": {"enabled": true, "after_ignored": 1, "factor": 100,
                               "max_s": 100, "decay_s": 600}
            }
        },
        "limits": [
            {"name": "shared", "class": "*", "route": "*", "rate_per_s": 0.1, "burst": 1,
             "key": key}
        ]
    })
}

/// Sends `n` requests of `ua` with `headers` from `c`, one after the other, as fast as they
/// go: the first takes the token, the rest ignore the Retry-After they get. Returns the
/// statuses.
async fn hammer(
    c: &reqwest::Client,
    url: &str,
    ua: &str,
    headers: &[(&str, &str)],
    n: usize,
) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(get(c, url, ua, headers).await.status);
    }
    out
}

/// Polls with requests of `ua` and `headers` from `c` until one is admitted (30 s deadline);
/// true when one was.
async fn admitted_again(
    c: &reqwest::Client,
    url: &str,
    ua: &str,
    headers: &[(&str, &str)],
) -> bool {
    poll_until(Duration::from_secs(30), || async {
        (get(c, url, ua, headers).await.status == 200).then_some(())
    })
    .await
    .is_some()
}

#[tokio::test]
async fn a_keyless_script_puts_no_penalty_on_the_shared_missing_key() {
    let up = TestUpstream::start().await;
    let envoy = Envoy::start(
        EnvoyOpts::with_config(config("header:x-api-key"))
            .in_front_of(&up)
            .fake_verifier(vec![("127.0.0.31", "googlebot", "verified")]),
    )
    .await;
    let url = envoy.url("/api/items");
    let curl = client(ip(30));
    assert_eq!(
        hammer(&curl, &url, UA_CURL, &[], 5).await,
        [200, 429, 429, 429, 429]
    );
    // A verified Googlebot and a browser without a key share the missing key's bucket (the
    // operator's choice), not the script's penalty: both get in once it has refilled.
    let googlebot = client(ip(31));
    assert!(admitted_again(&googlebot, &url, UA_GOOGLEBOT, &[]).await);
    let browser = client(ip(32));
    assert!(admitted_again(&browser, &url, UA_CHROME, &[]).await);
    envoy
        .assert_counters(&[
            ("crawlguard.class.script.escalated", 0),
            ("crawlguard.class.script.retry_after_ignored", 0),
            ("crawlguard.class.search_crawler.escalated", 0),
            ("crawlguard.class.human.escalated", 0),
        ])
        .await;
}

#[tokio::test]
async fn naming_a_victims_account_puts_no_penalty_on_it() {
    let up = TestUpstream::start().await;
    let envoy = Envoy::start_in_front_of(&up, config("header:x-account")).await;
    let url = envoy.url("/api/items");
    let attacker = client(ip(33));
    let list = [("x-account", "victim-42, attacker-7")];
    assert_eq!(
        hammer(&attacker, &url, UA_CURL, &list, 5).await,
        [200, 429, 429, 429, 429]
    );
    // The victim, from its own address, with its own account: its bucket refills and it is
    // admitted; the attacker's rejections were never the victim's to serve.
    let victim = client(ip(34));
    assert!(admitted_again(&victim, &url, UA_CURL, &[("x-account", "victim-42")]).await);
    assert_eq!(envoy.counter("crawlguard.class.script.escalated").await, 0);
}

#[tokio::test]
async fn a_scripts_penalty_is_not_served_by_a_browser_at_the_same_address() {
    let up = TestUpstream::start().await;
    let envoy = Envoy::start_in_front_of(&up, config("client_ip")).await;
    let url = envoy.url("/");
    // One address, two clients: a script that ignores its Retry-After, and a browser.
    let nat = client(ip(35));
    // 200, then 429 (told 1 s), ignored -> step 1 (100 s), step 2, ...
    assert_eq!(
        hammer(&nat, &url, UA_CURL, &[], 4).await,
        [200, 429, 429, 429]
    );
    assert_eq!(envoy.counter("crawlguard.class.script.escalated").await, 2);
    // The browser gets the bucket's own verdict: admitted once it refilled.
    assert!(admitted_again(&nat, &url, UA_CHROME, &[]).await);
    // The script still serves its 100 s penalty: rejected at once, with the step's wait.
    let r = get(&nat, &url, UA_CURL, &[]).await;
    assert_eq!((r.status, r.retry_after_s()), (429, Some(100)));
    envoy
        .assert_counters(&[
            ("crawlguard.class.script.escalated", 3),
            ("crawlguard.class.human.escalated", 0),
            ("crawlguard.class.human.retry_after_ignored", 0),
        ])
        .await;
}
