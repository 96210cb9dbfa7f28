//! `limits[].key: "header:user-agent"` in a real Envoy (issue 19, item 13): one bucket per
//! User-Agent string, shared by every address that sends it, each header line taken whole
//! (the commas of `(KHTML, like Gecko)` do not split it into parts other browsers share).

use crawlguard_integration::{client, ip, sequential, statuses, Envoy, EnvoyOpts, NO_REFILL_PER_S};
use serde_json::json;

const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, \
                      like Gecko) Chrome/120.0.0.0 Safari/537.36";
/// Edge: Chrome's User-Agent up to the comma and beyond, plus its own product.
const EDGE: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, \
                    like Gecko) Chrome/120.0.0.0 Safari/537.36 Edg/120.0.0.0";

#[tokio::test]
async fn a_user_agent_key_is_one_bucket_per_whole_user_agent_across_addresses() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "verifier": {"enabled": false},
        "limits": [{"name": "per_ua", "class": "human", "route": "*", "rate_per_s": NO_REFILL_PER_S,
                    "burst": 3, "key": "header:user-agent"}]
    })))
    .await;
    let url = envoy.url("/page");
    // Two addresses, one User-Agent: one bucket of 3.
    let a = sequential(&client(ip(2)), &url, CHROME, 2).await;
    let b = sequential(&client(ip(3)), &url, CHROME, 2).await;
    assert_eq!(statuses(&a), [200, 200]);
    assert_eq!(statuses(&b), [200, 429]);
    // Another User-Agent sharing everything up to Chrome's comma: a bucket of its own.
    let edge = sequential(&client(ip(4)), &url, EDGE, 4).await;
    assert_eq!(statuses(&edge), [200, 200, 200, 429]);
    envoy
        .assert_counters(&[
            ("crawlguard.class.human.allowed", 6),
            ("crawlguard.class.human.limited", 2),
        ])
        .await;
    envoy.assert_log_clean();
}

const CURL: &str = "curl/8.5.0";
const MOJEEK: &str = "Mozilla/5.0 (compatible; MojeekBot/0.11; +https://www.mojeek.com/bot.html)";
const QWANT: &str = "Mozilla/5.0 (compatible; Qwantbot/1.0; +https://help.qwant.com/bot/)";

/// A client bound to 127.0.`third`.`last`: another /24 of loopback for each `third`.
fn client_in(third: u8, last: u8) -> reqwest::Client {
    client(std::net::Ipv4Addr::new(127, 0, third, last))
}

#[tokio::test]
async fn a_limits_own_prefix_holds_a_pool_of_addresses_to_its_networks_share() {
    // Per address 4, per /24 10: five addresses of one /24 under their own limit get 10 in
    // all; an address of another /24 has its own 10.
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "verifier": {"enabled": false},
        "limits": [
            {"name": "per_ip", "class": "script", "route": "*", "rate_per_s": NO_REFILL_PER_S,
             "burst": 4, "key": "client_ip"},
            {"name": "per_24", "class": "script", "route": "*", "rate_per_s": NO_REFILL_PER_S,
             "burst": 10, "key": "client_ip", "ipv4_prefix_len": 24, "ipv6_prefix_len": 48}
        ]
    })))
    .await;
    let url = envoy.url("/page");
    let mut pool = Vec::new();
    for last in 10..15 {
        pool.extend(statuses(
            &sequential(&client_in(0, last), &url, CURL, 4).await,
        ));
    }
    // In order: 4 + 4 + 2 admitted, then the /24 is empty.
    let want: Vec<u16> = [[200; 4], [200; 4], [200, 200, 429, 429], [429; 4], [429; 4]].concat();
    assert_eq!(pool, want);
    let other = sequential(&client_in(1, 10), &url, CURL, 5).await;
    assert_eq!(statuses(&other), [200, 200, 200, 200, 429]);
    envoy
        .assert_counters(&[
            ("crawlguard.class.script.allowed", 14),
            ("crawlguard.class.script.limited", 11),
        ])
        .await;
    envoy.assert_log_clean();
}

#[tokio::test]
async fn a_bot_key_is_one_bucket_per_operator_and_a_path_key_one_per_path() {
    let envoy = Envoy::start(EnvoyOpts::with_config(json!({
        "verifier": {"enabled": false},
        "limits": [
            {"name": "per_bot", "class": "other_bot", "route": "*", "rate_per_s": NO_REFILL_PER_S,
             "burst": 6, "key": "bot"},
            {"name": "per_path", "class": "script", "route": "*", "rate_per_s": NO_REFILL_PER_S,
             "burst": 3, "key": "path"}
        ]
    })))
    .await;
    let url = envoy.url("/page");
    // MojeekBot from three addresses: 6 in all.
    let mut mojeek = Vec::new();
    for last in 20..23 {
        mojeek.extend(statuses(
            &sequential(&client(ip(last)), &url, MOJEEK, 3).await,
        ));
    }
    assert_eq!(mojeek, [200, 200, 200, 200, 200, 200, 429, 429, 429]);
    // Another operator from one of those addresses has its own bucket.
    let qwant = sequential(&client(ip(20)), &url, QWANT, 7).await;
    assert_eq!(statuses(&qwant), [200, 200, 200, 200, 200, 200, 429]);
    // A path: one bucket whatever the address; its query string does not make a new one.
    let hot = [
        envoy.url("/hot"),
        envoy.url("/hot?a=1"),
        envoy.url("/hot?b=2"),
        envoy.url("/hot?c=3"),
    ];
    let mut herd = Vec::new();
    for (i, u) in hot.iter().enumerate() {
        let last = 30 + u8::try_from(i).unwrap_or(0);
        herd.push(client::get(&client(ip(last)), u, CURL, &[]).await.status);
    }
    assert_eq!(herd, [200, 200, 200, 429]);
    let cold = sequential(&client(ip(30)), &envoy.url("/cold"), CURL, 4).await;
    assert_eq!(statuses(&cold), [200, 200, 200, 429]);
    envoy
        .assert_counters(&[
            ("crawlguard.class.other_bot.allowed", 12),
            ("crawlguard.class.other_bot.limited", 4),
            ("crawlguard.class.script.allowed", 6),
            ("crawlguard.class.script.limited", 2),
        ])
        .await;
    envoy.assert_log_clean();
}
