//! The aggregate limit keys (`limits[].key`): a limit's own address prefix, `bot`, `path`,
//! `header:user-agent` in a limit of every class, and compound keys, decided by
//! `limits::decision::decide` over the in-memory store with a frozen clock, so every count
//! is exact (a bucket of burst N admits exactly N).

use crawlguard_core::config::{self, Config};
use crawlguard_core::identity::class::Class;
use crawlguard_core::identity::client_ip;
use crawlguard_core::limits::bucket::NS_PER_S;
use crawlguard_core::limits::decision::decide;
use crawlguard_core::limits::limiter::{Decision, LimitResult, Limiter, RequestKeys};
use crawlguard_testkit::MemStore;
use std::net::IpAddr;

const T0: u64 = 1_700_000_000 * NS_PER_S;

/// One request as the limiter sees it.
#[derive(Clone)]
struct Req {
    ip: &'static str,
    bot: Option<&'static str>,
    path: &'static [u8],
    user_agent: Option<&'static [u8]>,
    class: Class,
}

fn req(ip: &'static str) -> Req {
    Req {
        ip,
        bot: None,
        path: b"/",
        user_agent: None,
        class: Class::Script,
    }
}

/// A limiter over a fresh in-memory store for `limits` (a JSON list), with the other
/// sections as given in `extra` (`"client_ip":{...},` or empty).
struct Bench {
    cfg: Config,
    limiter: Limiter,
    store: MemStore,
}

impl Bench {
    fn new(extra: &str, limits: &str) -> Bench {
        let doc = format!(r#"{{{extra}"limits":{limits}}}"#);
        let cfg = config::parse(doc.as_bytes()).unwrap_or_else(|e| panic!("{doc}: {e}"));
        let limiter = Limiter::new(&cfg);
        let store = MemStore::default();
        limiter.table().precreate(&store).expect("precreate");
        Bench {
            cfg,
            limiter,
            store,
        }
    }

    /// Decides `r` at the frozen clock.
    fn run(&mut self, r: &Req) -> LimitResult {
        let ip: Option<IpAddr> = r.ip.parse().ok();
        let headers: Vec<(&str, Vec<Vec<u8>>)> = r
            .user_agent
            .map(|ua| vec![("user-agent", vec![ua.to_vec()])])
            .unwrap_or_default();
        let keys = RequestKeys {
            route: 0,
            client: ip.map(|ip| client_ip::masked(ip, &self.cfg.client_ip)),
            client_ip: ip,
            bot: r.bot,
            path: r.path,
            asn: None,
            key_headers: &headers,
            verified_claim: false,
        };
        decide(
            &self.cfg,
            &mut self.limiter,
            &self.store,
            &keys,
            r.class,
            T0,
            &mut || 0,
        )
    }

    /// How many of `n` requests `r` the limits admit.
    fn admitted(&mut self, r: &Req, n: usize) -> usize {
        (0..n)
            .filter(|_| self.run(r).decision == Decision::Allowed)
            .count()
    }
}

/// One limit of burst 5 (and a rate too slow to refill in a frozen clock) with `key`.
fn limit(class: &str, key: &str) -> String {
    format!(
        r#"[{{"name":"agg","class":"{class}","route":"*","rate_per_s":0.001,"burst":5,"key":{key}}}]"#
    )
}

#[test]
fn a_limits_own_prefix_groups_a_network_whatever_the_global_grouping() {
    // Globally one bucket per address; this limit: one per /24 and per /48.
    let key = r#""client_ip","ipv4_prefix_len":24,"ipv6_prefix_len":48"#;
    let mut b = Bench::new("", &limit("script", key));
    // Three addresses of 192.0.2.0/24 share 5 tokens.
    let shared: usize = ["192.0.2.1", "192.0.2.77", "192.0.2.254"]
        .into_iter()
        .map(|ip| b.admitted(&req(ip), 5))
        .sum();
    assert_eq!(shared, 5);
    // The next /24 has its own 5.
    assert_eq!(b.admitted(&req("192.0.3.1"), 10), 5);
    // IPv6: two /64s of one /48 share; another /48 does not.
    assert_eq!(b.admitted(&req("2001:db8:1:1::1"), 3), 3);
    assert_eq!(b.admitted(&req("2001:db8:1:ffff::1"), 10), 2);
    assert_eq!(b.admitted(&req("2001:db8:2::1"), 10), 5);

    // A limit's prefix may be narrower than the global one: per address under a /24 default.
    let mut b = Bench::new(
        r#""client_ip":{"ipv4_prefix_len":24},"#,
        &limit("script", r#""client_ip","ipv4_prefix_len":32"#),
    );
    assert_eq!(b.admitted(&req("192.0.2.1"), 10), 5);
    assert_eq!(b.admitted(&req("192.0.2.2"), 10), 5);
    // Without it, the global /24 groups them.
    let mut b = Bench::new(
        r#""client_ip":{"ipv4_prefix_len":24},"#,
        &limit("script", r#""client_ip""#),
    );
    assert_eq!(b.admitted(&req("192.0.2.1"), 3), 3);
    assert_eq!(b.admitted(&req("192.0.2.2"), 10), 2);
}

#[test]
fn a_bot_key_is_one_bucket_per_operator_across_its_addresses() {
    let mut b = Bench::new("", &limit("search_crawler", r#""bot""#));
    let googlebot = |ip| Req {
        bot: Some("googlebot"),
        class: Class::SearchCrawler,
        ..req(ip)
    };
    // Five addresses, one operator: 5 in all.
    let total: usize = (1..=5)
        .map(|i| {
            b.admitted(
                &googlebot(
                    [
                        "198.51.100.1",
                        "198.51.100.2",
                        "203.0.113.3",
                        "203.0.113.4",
                        "2001:db8::5",
                    ][i - 1],
                ),
                3,
            )
        })
        .sum();
    assert_eq!(total, 5);
    // Another operator has its own bucket.
    let bingbot = Req {
        bot: Some("bingbot"),
        ..googlebot("198.51.100.1")
    };
    assert_eq!(b.admitted(&bingbot, 10), 5);
    // A request naming no bot is not charged by a bot key.
    let none = Req {
        bot: None,
        ..googlebot("198.51.100.1")
    };
    assert_eq!(b.admitted(&none, 50), 50);
}

#[test]
fn in_a_limit_of_every_class_a_copied_claim_never_spends_the_verified_bucket() {
    for key in [r#""bot""#, r#""header:user-agent""#] {
        let mut b = Bench::new("", &limit("*", key));
        let ua: &'static [u8] =
            b"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
        let spoofer = Req {
            bot: Some("googlebot"),
            user_agent: Some(ua),
            class: Class::Spoofed,
            ..req("192.0.2.9")
        };
        // The spoofer empties its own bucket...
        assert_eq!(b.admitted(&spoofer, 20), 5, "{key}");
        // ...and the verified crawler with the same User-Agent still has all of its own.
        let verified = Req {
            class: Class::SearchCrawler,
            ..spoofer.clone()
        };
        assert_eq!(b.admitted(&verified, 20), 5, "{key}");
        // Same class, same value: one bucket, whatever the address.
        let other_address = Req {
            ip: "198.51.100.7",
            ..verified.clone()
        };
        assert_eq!(b.admitted(&other_address, 5), 0, "{key}");
    }
    // In a limit of one class the key is the value alone (its buckets are as before).
    let mut b = Bench::new("", &limit("script", r#""header:user-agent""#));
    let curl = Req {
        user_agent: Some(b"curl/8.5.0"),
        ..req("192.0.2.1")
    };
    assert_eq!(b.admitted(&curl, 3), 3);
    assert_eq!(
        b.admitted(
            &Req {
                ip: "198.51.100.1",
                ..curl
            },
            10
        ),
        2
    );
}

#[test]
fn a_path_key_is_one_bucket_per_path_and_a_compound_key_per_combination() {
    let mut b = Bench::new("", &limit("*", r#""path""#));
    let page = Req {
        path: b"/fresh-article",
        ..req("192.0.2.1")
    };
    let herd: usize = ["192.0.2.1", "198.51.100.2", "203.0.113.3"]
        .into_iter()
        .map(|ip| b.admitted(&Req { ip, ..page.clone() }, 3))
        .sum();
    assert_eq!(herd, 5);
    assert_eq!(
        b.admitted(
            &Req {
                path: b"/other",
                ..page.clone()
            },
            10
        ),
        5
    );

    // One bucket per address and path.
    let mut b = Bench::new("", &limit("*", r#"["client_ip","path"]"#));
    assert_eq!(b.admitted(&page, 10), 5);
    assert_eq!(
        b.admitted(
            &Req {
                path: b"/other",
                ..page.clone()
            },
            10
        ),
        5
    );
    assert_eq!(
        b.admitted(
            &Req {
                ip: "192.0.2.2",
                ..page.clone()
            },
            10
        ),
        5
    );
    // A compound key with a bot part charges nothing for a request naming no bot.
    let mut b = Bench::new("", &limit("*", r#"["bot","path"]"#));
    assert_eq!(b.admitted(&page, 50), 50);
    let bot = Req {
        bot: Some("ahrefsbot"),
        class: Class::OtherBot,
        ..page.clone()
    };
    assert_eq!(b.admitted(&bot, 10), 5);
}

#[test]
fn a_compound_key_naming_too_many_combinations_is_malformed() {
    // 16 distinct values of one header are 16 keys (allowed); 17 are malformed, compound or not.
    let doc = |key: &str| {
        format!(
            r#"[{{"name":"agg","class":"*","route":"*","rate_per_s":1000,"burst":1000,"key":{key}}}]"#
        )
    };
    let lines =
        |n: usize| -> Vec<Vec<u8>> { (0..n).map(|i| format!("k{i}").into_bytes()).collect() };
    // The decision for `key` with `n` values of x-key and `m` of x-other.
    let decision = |key: &str, n: usize, m: usize| {
        let mut b = Bench::new("", &doc(key));
        let headers = vec![("x-key", lines(n)), ("x-other", lines(m))];
        let keys = RequestKeys {
            route: 0,
            client: "192.0.2.1".parse().ok(),
            client_ip: "192.0.2.1".parse().ok(),
            bot: None,
            path: b"/",
            asn: None,
            key_headers: &headers,
            verified_claim: false,
        };
        decide(
            &b.cfg,
            &mut b.limiter,
            &b.store,
            &keys,
            Class::Script,
            T0,
            &mut || 0,
        )
        .decision
    };
    let malformed = Decision::Malformed { limit: 0 };
    assert_eq!(
        decision(r#"["client_ip","header:x-key"]"#, 16, 4),
        Decision::Allowed
    );
    assert_eq!(
        decision(r#"["client_ip","header:x-key"]"#, 17, 4),
        malformed
    );
    assert_eq!(
        decision(r#"["header:x-key","header:x-other"]"#, 4, 4),
        Decision::Allowed
    );
    // Two headers of 5 values each: 25 combinations, more than 16.
    assert_eq!(
        decision(r#"["header:x-key","header:x-other"]"#, 5, 5),
        malformed
    );
}

#[test]
fn an_aggregate_key_never_escalates_a_network_for_one_clients_ignored_retry_after() {
    // Class script escalates by default after 3 ignored Retry-Afters. A client hammering
    // past its Retry-After escalates its own address key, never its /24's.
    let escalates = |key: &str| {
        let mut b = Bench::new("", &limit("script", key));
        (0..30).any(|_| b.run(&req("192.0.2.1")).escalated)
    };
    assert!(escalates(r#""client_ip""#));
    assert!(!escalates(r#""client_ip","ipv4_prefix_len":24"#));
    assert!(!escalates(r#""path""#));
}
