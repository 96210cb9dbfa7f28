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
