//! Per-request decision: exempt path? which route? which limits? take a token from each.
//!
//! Pure logic over injected time, store and randomness, so it is tested on the host. The
//! proxy-wasm glue (`lib.rs`) only gathers the request fields and acts on the [`Outcome`].

use crate::bucket::Take;
use crate::classify::Class;
use crate::client_ip;
use crate::config::{Config, KeyKind, Mode};
use crate::respond;
use crate::store::{self, Charge, Fallback, LocalBuckets, SharedData, SlotTable};
use std::hash::{BuildHasher, Hash, Hasher};

/// Shared-data key prefix of bucket slots.
pub const BUCKET_PREFIX: &str = "cg:b:";

/// The request fields the decision needs (raw bytes as Envoy gives them).
pub struct Request<'a> {
    /// `:path`, query string included.
    pub path: &'a [u8],
    /// Envoy's downstream address (`source.address`), e.g. `127.0.0.2:40000`.
    pub remote_address: Option<&'a [u8]>,
    /// `x-forwarded-for` value, if any.
    pub xff: Option<&'a [u8]>,
    /// Every value (one per header line, in order) of a request header (lowercase name),
    /// for `header:<name>` keys; empty when absent.
    pub header: &'a dyn Fn(&str) -> Vec<Vec<u8>>,
}

/// How a request over a limit is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reject {
    /// Index of the limit in [`Config::limits`].
    pub limit: usize,
    /// Status to answer with (class `reject_status`).
    pub status: u16,
    /// Retry-After, seconds (jitter included).
    pub retry_after_s: u32,
}

/// What happens to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Passed every matching limit (or none matched).
    Allowed,
    /// Path is in `exempt_paths`: never limited, no token taken.
    Exempt,
    /// Over a limit, answer locally with a rejection.
    Limited(Reject),
    /// Over a limit in shadow mode: counted, sent upstream anyway.
    ShadowLimited(Reject),
    /// A `header:<name>` key of limit `limit` (index in [`Config::limits`]) named more than
    /// [`MAX_KEY_VALUES`] distinct values: answered with a 400, no token taken.
    Malformed {
        /// Index of the limit in [`Config::limits`].
        limit: usize,
    },
    /// The same in shadow mode: counted, sent upstream anyway.
    ShadowMalformed {
        /// Index of the limit in [`Config::limits`].
        limit: usize,
    },
}

/// Store trouble met while deciding (each is counted; none fails the request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreEvents {
    /// Host call errors.
    pub errors: u32,
    /// CAS retries exhausted.
    pub cas_exhausted: u32,
    /// Slot collisions with active buckets.
    pub collisions: u32,
    /// Slots that did not decode.
    pub corrupt: u32,
}

impl StoreEvents {
    /// True when any bucket was decided by the local fallback (the request "failed open"
    /// onto the per-worker bucket).
    pub fn fell_back(&self) -> bool {
        self.errors + self.cas_exhausted + self.collisions + self.corrupt > 0
    }
}

/// The decision for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Route index (see [`Config::route_name`]).
    pub route: usize,
    /// The decision.
    pub decision: Decision,
    /// Store trouble met.
    pub store: StoreEvents,
}

/// Per-VM limiter state: the slot table, the local fallback buckets and the keyed hasher.
#[derive(Debug)]
pub struct Limiter {
    table: SlotTable,
    local: LocalBuckets,
    hasher: ahash::RandomState,
}

impl Limiter {
    /// Builds the limiter for `cfg.store`.
    pub fn new(cfg: &Config) -> Limiter {
        let s = cfg.store.hash_seed;
        Limiter {
            table: SlotTable::new(BUCKET_PREFIX, cfg.store.slots, cfg.store.cas_retries),
            local: LocalBuckets::new(cfg.store.fallback_buckets as usize),
            hasher: ahash::RandomState::with_seeds(
                s,
                s ^ 0x243f_6a88_85a3_08d3,
                s ^ 0x1319_8a2e_0370_7344,
                s ^ 0xa409_3822_299f_31d0,
            ),
        }
    }

    /// The slot table (for pre-creating slots at start).
    pub fn table(&self) -> &SlotTable {
        &self.table
    }

    /// Fingerprint of a verification claim (full client IP, bot id) for the verdict cache.
    pub fn claim_fingerprint(&self, ip: std::net::IpAddr, bot_id: &str) -> u64 {
        let mut h = self.hasher.build_hasher();
        "claim".hash(&mut h);
        ip.hash(&mut h);
        bot_id.hash(&mut h);
        h.finish()
    }

    /// Fingerprint of a client prefix (an address already masked to the configured prefix
    /// length) for the per-prefix spoofed count.
    pub fn prefix_fingerprint(&self, prefix: std::net::IpAddr) -> u64 {
        let mut h = self.hasher.build_hasher();
        "prefix".hash(&mut h);
        prefix.hash(&mut h);
        h.finish()
    }

    fn fingerprint(&self, limit_name: &str, key: &KeyPart<'_>) -> u64 {
        let mut h = self.hasher.build_hasher();
        // The slot count is part of a bucket's identity: with another `store.slots` every
        // key gets a new fingerprint, so every bucket starts full again, as the load log
        // says (`store::record_shape`); otherwise a key whose slot happened not to move
        // would keep its old state and the others would not.
        self.table.len().hash(&mut h);
        limit_name.hash(&mut h);
        key.hash(&mut h);
        h.finish()
    }
}

#[derive(Hash)]
enum KeyPart<'a> {
    Ip(std::net::IpAddr),
    UnknownIp,
    Global,
    /// One value of the key header; `None` = absent or blank.
    Header(Option<&'a [u8]>),
}

/// Most distinct values of a key header a request may name; each is charged. A request
/// naming more is rejected as malformed ([`Decision::Malformed`]): it must charge every key
/// it names or be rejected, so padding cannot hide an exhausted key among fresh ones.
pub const MAX_KEY_VALUES: usize = 16;

/// The distinct values of a key header: every line, split on commas (RFC 9110 section 5.3
/// list syntax), trimmed, blanks dropped, in first-seen order. A request that repeats the
/// header (or lists several values) is charged once per distinct value, so a client cannot
/// slip an exhausted key past the limit behind a fresh one. Collecting stops at
/// `MAX_KEY_VALUES + 1` values (enough to know the request is malformed), so a huge list
/// costs no more than that many comparisons per part.
pub fn key_values(lines: &[Vec<u8>]) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = Vec::new();
    for part in lines.iter().flat_map(|l| l.split(|b| *b == b',')) {
        let v = part.trim_ascii();
        if !v.is_empty() && !out.contains(&v) {
            out.push(v);
            if out.len() > MAX_KEY_VALUES {
                break;
            }
        }
    }
    out
}

/// Strips the query string (and fragment) from `:path`.
pub fn path_only(path: &[u8]) -> &[u8] {
    let end = path
        .iter()
        .position(|b| *b == b'?' || *b == b'#')
        .unwrap_or(path.len());
    path.get(..end).unwrap_or(path)
}

/// Decides `req` of class `class` at `now_ns`: exempt, else charges every matching limit in
/// order; if one is empty, refunds the ones already charged and rejects (or shadow-rejects).
/// A key header naming more than [`MAX_KEY_VALUES`] values makes the request malformed, with
/// the same refund.
/// `random` feeds the Retry-After jitter; it is called only on a rejection (it may be a host
/// call).
pub fn decide(
    cfg: &Config,
    limiter: &mut Limiter,
    store: &dyn SharedData,
    req: &Request<'_>,
    class: Class,
    now_ns: u64,
    random: &mut dyn FnMut() -> u32,
) -> Outcome {
    let path = path_only(req.path);
    let route = cfg.route_of(path);
    let mut events = StoreEvents::default();
    if cfg.exempt_paths.iter().any(|p| p.as_bytes() == path) {
        return Outcome {
            route,
            decision: Decision::Exempt,
            store: events,
        };
    }
    let mut ip: Option<Option<std::net::IpAddr>> = None;
    let mut charged: Vec<(u64, usize, Charge)> = Vec::new();
    let mut decision = Decision::Allowed;
    for (i, limit) in cfg.limits.iter().enumerate() {
        if limit.class.is_some_and(|c| c != class) || limit.route.is_some_and(|r| r != route) {
            continue;
        }
        let header_lines;
        let header_keys: Vec<KeyPart<'_>>;
        // One key for client_ip/global (no allocation); one per distinct header value.
        let one_key;
        let keys: &[KeyPart<'_>] = match &limit.key {
            KeyKind::Global => {
                one_key = KeyPart::Global;
                std::slice::from_ref(&one_key)
            }
            KeyKind::ClientIp => {
                let ip = *ip.get_or_insert_with(|| {
                    client_ip::client_ip(&cfg.client_ip, req.remote_address, req.xff)
                        .map(|a| client_ip::masked(a, &cfg.client_ip))
                });
                one_key = ip.map_or(KeyPart::UnknownIp, KeyPart::Ip);
                std::slice::from_ref(&one_key)
            }
            KeyKind::Header(name) => {
                header_lines = (req.header)(name);
                let values = key_values(&header_lines);
                if values.len() > MAX_KEY_VALUES {
                    decision = match cfg.mode {
                        Mode::Enforce => Decision::Malformed { limit: i },
                        Mode::Shadow => Decision::ShadowMalformed { limit: i },
                    };
                    break;
                }
                header_keys = if values.is_empty() {
                    vec![KeyPart::Header(None)]
                } else {
                    values
                        .into_iter()
                        .map(|v| KeyPart::Header(Some(v)))
                        .collect()
                };
                &header_keys
            }
        };
        for key in keys {
            let fp = limiter.fingerprint(&limit.name, key);
            let c = store::charge(
                &limiter.table,
                store,
                &mut limiter.local,
                fp,
                now_ns,
                limit.rate,
            );
            match c.fallback {
                None => {}
                Some(Fallback::StoreError) => events.errors += 1,
                Some(Fallback::CasExhausted) => events.cas_exhausted += 1,
                Some(Fallback::Collision) => events.collisions += 1,
                Some(Fallback::CorruptSlot) => events.corrupt += 1,
            }
            match c.take {
                Take::Allowed { .. } => charged.push((fp, i, c)),
                Take::Limited { wait_ns } => {
                    let policy = cfg.policy(class);
                    let reject = Reject {
                        limit: i,
                        status: policy.reject_status,
                        retry_after_s: respond::retry_after_s(
                            wait_ns,
                            &policy.retry_after,
                            random(),
                        ),
                    };
                    decision = match cfg.mode {
                        Mode::Enforce => Decision::Limited(reject),
                        Mode::Shadow => Decision::ShadowLimited(reject),
                    };
                    break;
                }
            }
        }
        if decision != Decision::Allowed {
            break;
        }
    }
    if decision != Decision::Allowed {
        // A rejected request consumes nothing.
        for (fp, i, c) in &charged {
            if let Some(limit) = cfg.limits.get(*i) {
                store::refund(
                    &limiter.table,
                    store,
                    &mut limiter.local,
                    *fp,
                    c,
                    limit.rate,
                );
            }
        }
    }
    Outcome {
        route,
        decision,
        store: events,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::NS_PER_S;
    use crate::config;
    use crate::store::mem::{Fault, MemStore};

    const T0: u64 = 1_700_000_000 * NS_PER_S;

    fn no_headers(_: &str) -> Vec<Vec<u8>> {
        Vec::new()
    }

    fn req<'a>(path: &'a str, remote: &'a str) -> Request<'a> {
        Request {
            path: path.as_bytes(),
            remote_address: Some(remote.as_bytes()),
            xff: None,
            header: &no_headers,
        }
    }

    fn setup(json: &str) -> (Config, Limiter, MemStore) {
        let cfg = config::parse(json.as_bytes()).expect("valid config");
        let lim = Limiter::new(&cfg);
        let store = MemStore::default();
        assert!(lim.table().precreate(&store).is_ok());
        (cfg, lim, store)
    }

    fn count_allowed(
        cfg: &Config,
        lim: &mut Limiter,
        store: &MemStore,
        r: &Request<'_>,
        class: Class,
        n: usize,
    ) -> usize {
        (0..n)
            .filter(|_| {
                decide(cfg, lim, store, r, class, T0, &mut || 0).decision == Decision::Allowed
            })
            .count()
    }

    const TWO_LIMITS: &str = r#"{"routes":[{"name":"api","path_prefix":"/api/"}],"limits":[
        {"name":"per_ip","class":"*","route":"*","rate_per_s":0.001,"burst":5,"key":"client_ip"},
        {"name":"api_global","class":"*","route":"api","rate_per_s":0.001,"burst":3,"key":"global"}]}"#;

    #[test]
    fn each_client_ip_has_its_own_bucket() {
        let (cfg, mut lim, store) = setup(TWO_LIMITS);
        let a = req("/", "127.0.0.2:1000");
        let b = req("/", "127.0.0.3:1000");
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 20),
            5
        );
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &b, Class::Human, 20),
            5
        );
    }

    #[test]
    fn rejected_request_consumes_no_other_bucket() {
        let (cfg, mut lim, store) = setup(TWO_LIMITS);
        // 3 API requests drain api_global; per_ip has 2 of 5 left.
        let a = req("/api/x", "127.0.0.2:1");
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 3),
            3
        );
        // 10 rejected API requests must not drain per_ip further.
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 10),
            0
        );
        let home = req("/", "127.0.0.2:1");
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &home, Class::Human, 10),
            2
        );
    }

    #[test]
    fn limited_outcome_carries_limit_status_and_retry_after() {
        let (cfg, mut lim, store) = setup(
            r#"{"classes":{"script":{"retry_after":{"min_s":2,"max_s":100,"jitter_s":0},"reject_status":503}},
                "limits":[{"name":"s","class":"script","route":"*","rate_per_s":0.1,"burst":1,"key":"client_ip"}]}"#,
        );
        let r = req("/x?q=1", "10.0.0.1:5");
        assert_eq!(
            decide(&cfg, &mut lim, &store, &r, Class::Script, T0, &mut || 0).decision,
            Decision::Allowed
        );
        // 0.1/s: next token in exactly 10 s.
        assert_eq!(
            decide(&cfg, &mut lim, &store, &r, Class::Script, T0, &mut || 0).decision,
            Decision::Limited(Reject {
                limit: 0,
                status: 503,
                retry_after_s: 10
            })
        );
        // Other classes do not match this limit.
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &r, Class::Human, 50),
            50
        );
    }

    #[test]
    fn exempt_paths_take_no_token_and_ignore_query() {
        let (cfg, mut lim, store) = setup(TWO_LIMITS);
        let r = req("/", "1.2.3.4:1");
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &r, Class::Human, 10),
            5
        );
        for p in [
            "/robots.txt",
            "/robots.txt?x=1",
            "/sitemap.xml",
            "/sitemap_index.xml",
        ] {
            let e = req(p, "1.2.3.4:1");
            assert_eq!(
                decide(&cfg, &mut lim, &store, &e, Class::Human, T0, &mut || 0).decision,
                Decision::Exempt
            );
        }
        let not = req("/robots.txt.bak", "1.2.3.4:1");
        assert!(matches!(
            decide(&cfg, &mut lim, &store, &not, Class::Human, T0, &mut || 0).decision,
            Decision::Limited(_)
        ));
    }

    #[test]
    fn shadow_mode_never_rejects_but_reports() {
        let (cfg, mut lim, store) = setup(
            r#"{"mode":"shadow","limits":[{"name":"s","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"global"}]}"#,
        );
        let r = req("/", "1.2.3.4:1");
        let v: Vec<_> = (0..4)
            .map(|_| decide(&cfg, &mut lim, &store, &r, Class::Human, T0, &mut || 0).decision)
            .collect();
        assert_eq!(v[0], Decision::Allowed);
        assert_eq!(v[1], Decision::Allowed);
        assert!(matches!(
            v[2],
            Decision::ShadowLimited(Reject {
                limit: 0,
                status: 429,
                ..
            })
        ));
        assert!(matches!(v[3], Decision::ShadowLimited(_)));
    }

    #[test]
    fn header_keyed_limits_split_by_value() {
        let (cfg, mut lim, store) = setup(
            r#"{"limits":[{"name":"k","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"header:x-api-key"}]}"#,
        );
        let key_a = |n: &str| {
            if n == "x-api-key" {
                vec![b"a".to_vec()]
            } else {
                vec![]
            }
        };
        let key_b = |n: &str| {
            if n == "x-api-key" {
                vec![b"b".to_vec()]
            } else {
                vec![]
            }
        };
        let mk = |h: &'static dyn Fn(&str) -> Vec<Vec<u8>>| Request {
            path: b"/",
            remote_address: Some(b"1.1.1.1:1"),
            xff: None,
            header: h,
        };
        let ra = mk(Box::leak(Box::new(key_a)));
        let rb = mk(Box::leak(Box::new(key_b)));
        let rn = mk(&no_headers);
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &ra, Class::Human, 5),
            2
        );
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &rb, Class::Human, 5),
            2
        );
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &rn, Class::Human, 5),
            2
        );
        // An exhausted key listed behind a fresh one (second line, or comma list) is still
        // charged: the request is rejected and the fresh key keeps its tokens.
        let lines = |v: &'static [&'static [u8]]| {
            move |n: &str| -> Vec<Vec<u8>> {
                if n == "x-api-key" {
                    v.iter().map(|b| b.to_vec()).collect()
                } else {
                    vec![]
                }
            }
        };
        let rp = mk(Box::leak(Box::new(lines(&[b"fresh", b"a"]))));
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &rp, Class::Human, 3),
            0
        );
        let rl = mk(Box::leak(Box::new(lines(&[b" fresh , , a "]))));
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &rl, Class::Human, 3),
            0
        );
        let rf = mk(Box::leak(Box::new(lines(&[b"fresh"]))));
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &rf, Class::Human, 5),
            2
        );
        // A blank header is the same key as a missing one (exhausted above).
        let rb = mk(Box::leak(Box::new(lines(&[b"  "]))));
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &rb, Class::Human, 2),
            0
        );
    }

    /// `n` distinct key values `k0`..`k<n-1>`, one per line, after `first`.
    fn many_values(first: &'static [u8], n: usize) -> Request<'static> {
        let mut v: Vec<Vec<u8>> = vec![first.to_vec()];
        v.extend((0..n).map(|i| format!("k{i}").into_bytes()));
        let h = move |name: &str| {
            if name == "x-api-key" {
                v.clone()
            } else {
                vec![]
            }
        };
        Request {
            path: b"/",
            remote_address: Some(b"1.1.1.1:1"),
            xff: None,
            header: Box::leak(Box::new(h)),
        }
    }

    #[test]
    fn more_than_max_key_values_is_malformed_and_charges_nothing() {
        const LIMITS: &str = r#""limits":[
            {"name":"ip","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"client_ip"},
            {"name":"k","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"header:x-api-key"}]"#;
        let (cfg, mut lim, store) = setup(&format!("{{{LIMITS}}}"));
        // One request with key "a": the per-IP bucket and "a" have one token left each.
        let a = many_values(b"a", 0);
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 1),
            1
        );
        // "a" + 16 fresh values = 17 distinct: malformed, whatever the buckets hold.
        let padded = many_values(b"a", MAX_KEY_VALUES);
        for _ in 0..3 {
            assert_eq!(
                decide(&cfg, &mut lim, &store, &padded, Class::Human, T0, &mut || 0).decision,
                Decision::Malformed { limit: 1 }
            );
        }
        // The per-IP token charged before the key limit was refunded each time: one left
        // for "a" (which then has one token of its own left), none after.
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 3),
            1
        );
        // Exactly 16 distinct values ("a", "k0".."k14"): every one is charged.
        let (cfg, mut lim, store) = setup(
            r#"{"limits":[{"name":"k","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"header:x-api-key"}]}"#,
        );
        let sixteen = many_values(b"a", MAX_KEY_VALUES - 1);
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &sixteen, Class::Human, 3),
            2
        );
        let k14 = many_values(b"k14", 0);
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &k14, Class::Human, 1),
            0,
            "the last of the 16 values was charged by both requests"
        );
        let k15 = many_values(b"k15", 0);
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &k15, Class::Human, 3),
            2
        );
        // Shadow mode: counted as malformed, never rejected, nothing charged.
        let (cfg, mut lim, store) = setup(&format!("{{\"mode\":\"shadow\",{LIMITS}}}"));
        for _ in 0..3 {
            assert_eq!(
                decide(&cfg, &mut lim, &store, &padded, Class::Human, T0, &mut || 0).decision,
                Decision::ShadowMalformed { limit: 1 }
            );
        }
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 3),
            2
        );
    }

    #[test]
    fn another_slot_count_or_seed_starts_every_bucket_full_again() {
        let doc = |slots: u32, seed: u64| {
            format!(
                r#"{{"store":{{"slots":{slots},"hash_seed":{seed}}},"limits":[{{"name":"ip","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"client_ip"}}]}}"#
            )
        };
        let store = MemStore::default();
        let clients: Vec<String> = (1..=20).map(|i| format!("10.0.0.{i}:1")).collect();
        let run = |json: &str, n: usize| -> Vec<usize> {
            let cfg = config::parse(json.as_bytes()).expect("valid config");
            let mut lim = Limiter::new(&cfg);
            assert!(lim.table().precreate(&store).is_ok());
            clients
                .iter()
                .map(|c| count_allowed(&cfg, &mut lim, &store, &req("/", c), Class::Human, n))
                .collect()
        };
        // Same shared store throughout, as across configurations of one Envoy.
        assert_eq!(run(&doc(64, 1), 3), vec![2; 20]);
        // Same shape, new Limiter (a configuration push): every bucket is kept.
        assert_eq!(run(&doc(64, 1), 3), vec![0; 20]);
        // 64 -> 128 slots (half the keys' first slot would not move): all start full.
        assert_eq!(run(&doc(128, 1), 3), vec![2; 20]);
        assert_eq!(run(&doc(128, 2), 3), vec![2; 20]);
    }

    #[test]
    fn key_values_split_dedupe_and_trim() {
        let lines = vec![b"a, b".to_vec(), b" a ,c,,".to_vec(), b"".to_vec()];
        assert_eq!(key_values(&lines), vec![&b"a"[..], b"b", b"c"]);
        assert!(key_values(&[]).is_empty());
        assert!(key_values(&[b" , ".to_vec()]).is_empty());
        // Collection stops one past the maximum.
        let huge: Vec<u8> = (0..10_000)
            .map(|i| format!("v{i},"))
            .collect::<String>()
            .into_bytes();
        assert_eq!(key_values(&[huge]).len(), MAX_KEY_VALUES + 1);
    }

    #[test]
    fn ipv6_clients_in_one_64_share_a_bucket() {
        let (cfg, mut lim, store) = setup(TWO_LIMITS);
        let a = req("/", "[2001:db8:1:2::a]:1");
        let b = req("/", "[2001:db8:1:2::b]:1");
        let c = req("/", "[2001:db8:1:3::a]:1");
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 3),
            3
        );
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &b, Class::Human, 5),
            2
        );
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &c, Class::Human, 9),
            5
        );
    }

    #[test]
    fn store_faults_fall_back_and_still_limit() {
        for fault in [Fault::Error, Fault::CasMismatch, Fault::Truncate] {
            let (cfg, mut lim, store) = setup(TWO_LIMITS);
            store.fault.set(fault);
            let r = req("/", "9.9.9.9:1");
            let outs: Vec<_> = (0..8)
                .map(|_| decide(&cfg, &mut lim, &store, &r, Class::Human, T0, &mut || 0))
                .collect();
            let allowed = outs
                .iter()
                .filter(|o| o.decision == Decision::Allowed)
                .count();
            assert_eq!(allowed, 5, "{fault:?}");
            assert!(outs.iter().all(|o| o.store.fell_back()), "{fault:?}");
            assert!(outs.iter().all(|o| matches!(
                o.decision,
                Decision::Allowed | Decision::Limited(Reject { status: 429, .. })
            )));
        }
    }

    #[test]
    fn path_only_strips_query_and_fragment() {
        assert_eq!(path_only(b"/a?b#c"), b"/a");
        assert_eq!(path_only(b"/a#c?d"), b"/a");
        assert_eq!(path_only(b""), b"");
    }
}
