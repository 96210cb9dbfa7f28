//! Crawler verification: the verifier sidecar's verdict re-classes a claimed bot.
//!
//! The filter asks `GET /v1/verify?ip=<ip>&bot=<bot id>` on the verifier cluster (DESIGN.md,
//! "Verifier contract") and caches the verdict in shared data, in a bounded slot table like the
//! buckets, with expiry from the answer's `ttl_s`. While one worker's callout is in flight the
//! slot says so (with its own expiry), so requests from the same IP on other workers do not
//! call out again; they proceed as `unverified_bot` meanwhile.

use crate::classify::{Class, Classification};
use crate::store::{SharedData, StoreError};
use serde::Deserialize;
use std::net::IpAddr;

/// The verifier's answer about one (IP, bot id) claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BotVerdict {
    /// FCrDNS or published IP ranges confirm the claim.
    Verified,
    /// The claim was checked and failed.
    Spoofed,
    /// Could not decide now (DNS timeout, no method).
    Unknown,
}

impl BotVerdict {
    /// Lowercase name, as in the verifier's JSON and in stats.
    pub fn as_str(self) -> &'static str {
        match self {
            BotVerdict::Verified => "verified",
            BotVerdict::Spoofed => "spoofed",
            BotVerdict::Unknown => "unknown",
        }
    }
}

/// The class a request gets once its claim has `verdict`: the bot's own class when verified,
/// `spoofed` when the claim failed, `unverified_bot` otherwise. Requests without a claim to
/// verify keep their class.
pub fn reclass(c: &Classification<'_>, verdict: BotVerdict) -> Class {
    match c.bot {
        Some(bot) if bot.verify => class_for(verdict, bot.class),
        _ => c.class,
    }
}

/// The class of a claim to be `bot_class` once it has `verdict`.
pub fn class_for(verdict: BotVerdict, bot_class: Class) -> Class {
    match verdict {
        BotVerdict::Verified => bot_class,
        BotVerdict::Spoofed => Class::Spoofed,
        BotVerdict::Unknown => Class::UnverifiedBot,
    }
}

/// Why a callout did not give a usable verdict (each is counted as a verifier error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyError {
    /// `dispatch_http_call` was refused (e.g. unknown cluster): no callback will come.
    Dispatch,
    /// No response: timeout, connection refused or reset (Envoy gives no `:status`).
    NoResponse,
    /// A status other than 200.
    Status(String),
    /// Body is not the contract's JSON, or answers another ip/bot.
    Body(String),
}

impl VerifyError {
    /// Short kind for logs and stats: `dispatch`, `no_response`, `status`, `body`.
    pub fn kind(&self) -> &'static str {
        match self {
            VerifyError::Dispatch => "dispatch",
            VerifyError::NoResponse => "no_response",
            VerifyError::Status(_) => "status",
            VerifyError::Body(_) => "body",
        }
    }
}

/// A well-formed verifier answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// The verdict.
    pub verdict: BotVerdict,
    /// How long it may be cached, seconds (as sent; the caller clamps it).
    pub ttl_s: u64,
}

#[derive(Deserialize)]
struct Wire {
    ip: String,
    bot: String,
    verdict: BotVerdict,
    ttl_s: u64,
}

/// The `:path` of a verify request: `/v1/verify?ip=<ip>&bot=<bot id>`. Bot ids are
/// `[a-z0-9._-]` (validated) and IPs print without reserved characters, so no escaping is
/// needed beyond IPv6 colons, which RFC 3986 allows in a query.
pub fn request_path(ip: IpAddr, bot: &str) -> String {
    format!("/v1/verify?ip={ip}&bot={bot}")
}

/// Parses a verifier response: `status` is the `:status` header (`None` when the call failed
/// without a response), `body` the response body (at most a few hundred bytes are read).
/// The answer must be for `ip` and `bot`.
pub fn parse_response(
    status: Option<&[u8]>,
    body: &[u8],
    ip: IpAddr,
    bot: &str,
) -> Result<Answer, VerifyError> {
    let status = status.ok_or(VerifyError::NoResponse)?;
    if status != b"200" {
        return Err(VerifyError::Status(
            String::from_utf8_lossy(status).chars().take(16).collect(),
        ));
    }
    let w: Wire = serde_json::from_slice(body)
        .map_err(|e| VerifyError::Body(e.to_string().chars().take(120).collect()))?;
    let same_ip = w.ip.parse::<IpAddr>().is_ok_and(|a| a.to_canonical() == ip);
    if !same_ip || w.bot != bot {
        return Err(VerifyError::Body(format!(
            "answer for ip {:.48} bot {:.64}, asked {ip} {bot}",
            w.ip, w.bot
        )));
    }
    Ok(Answer {
        verdict: w.verdict,
        ttl_s: w.ttl_s,
    })
}

/// What the verdict cache holds for a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cached {
    /// A verdict that has not expired.
    Fresh(BotVerdict),
    /// Another request's callout for this claim is in flight.
    InFlight,
    /// A recent callout for this claim failed; do not call out again yet.
    Error,
    /// Nothing usable; `cas` is the slot's CAS for [`VerdictCache::mark_in_flight`].
    Miss {
        /// CAS token of the slot as read (0 if absent).
        cas: u32,
    },
}

const V_VERSION: u8 = 1;
/// Encoded verdict slot length: version (1) + fingerprint (8) + state (1) + expires_ns (8).
pub const VERDICT_SLOT_LEN: usize = 18;
const ST_VERIFIED: u8 = 1;
const ST_SPOOFED: u8 = 2;
const ST_UNKNOWN: u8 = 3;
const ST_IN_FLIGHT: u8 = 4;
const ST_ERROR: u8 = 5;

/// Encodes a verdict slot.
pub fn encode_verdict_slot(fp: u64, state: u8, expires_ns: u64) -> [u8; VERDICT_SLOT_LEN] {
    let mut out = [0u8; VERDICT_SLOT_LEN];
    let (v, rest) = out.split_at_mut(1);
    let (f, rest) = rest.split_at_mut(8);
    let (s, e) = rest.split_at_mut(1);
    v.copy_from_slice(&[V_VERSION]);
    f.copy_from_slice(&fp.to_le_bytes());
    s.copy_from_slice(&[state]);
    e.copy_from_slice(&expires_ns.to_le_bytes());
    out
}

/// Decodes a verdict slot into (fingerprint, state, expires_ns); `None` if malformed.
pub fn decode_verdict_slot(b: &[u8]) -> Option<(u64, u8, u64)> {
    let arr: &[u8; VERDICT_SLOT_LEN] = b.try_into().ok()?;
    let (v, rest) = arr.split_first()?;
    if *v != V_VERSION {
        return None;
    }
    let fp = u64::from_le_bytes(rest.get(0..8)?.try_into().ok()?);
    let st = *rest.get(8)?;
    let exp = u64::from_le_bytes(rest.get(9..17)?.try_into().ok()?);
    Some((fp, st, exp))
}

/// Verdict cache in shared data: `slots` keys `cg:v:<n>`, one slot per claim fingerprint
/// (a colliding claim simply overwrites: it is a cache, a miss only costs a callout).
#[derive(Debug, Clone)]
pub struct VerdictCache {
    keys: Vec<String>,
}

impl VerdictCache {
    /// A cache of `slots` slots (at least 1).
    pub fn new(slots: u32) -> VerdictCache {
        VerdictCache {
            keys: (0..slots.max(1)).map(|n| format!("cg:v:{n}")).collect(),
        }
    }

    fn key(&self, fp: u64) -> &str {
        let n = self.keys.len().max(1) as u64;
        self.keys
            .get((fp % n) as usize)
            .map(String::as_str)
            .unwrap_or("cg:v:0")
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Always false (there is at least one slot).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Creates every missing slot empty, so that [`VerdictCache::mark_in_flight`] is always
    /// CAS-checked (Envoy ignores the CAS of a write to an absent key). Returns slots created.
    pub fn precreate(&self, store: &dyn SharedData) -> Result<usize, StoreError> {
        crate::store::precreate_keys(store, &self.keys, &encode_verdict_slot(0, 0, 0))
    }

    /// Looks up claim `fp` at `now_ns`. Store errors read as a miss with CAS 0.
    pub fn lookup(&self, store: &dyn SharedData, fp: u64, now_ns: u64) -> Cached {
        let Ok(Some((bytes, cas))) = store.get(self.key(fp)) else {
            return Cached::Miss { cas: 0 };
        };
        match decode_verdict_slot(&bytes) {
            Some((owner, st, exp)) if owner == fp && exp > now_ns => match st {
                ST_VERIFIED => Cached::Fresh(BotVerdict::Verified),
                ST_SPOOFED => Cached::Fresh(BotVerdict::Spoofed),
                ST_UNKNOWN => Cached::Fresh(BotVerdict::Unknown),
                ST_IN_FLIGHT => Cached::InFlight,
                ST_ERROR => Cached::Error,
                _ => Cached::Miss { cas },
            },
            _ => Cached::Miss { cas },
        }
    }

    /// Marks claim `fp` in flight until `until_ns`, only if the slot is unchanged since the
    /// lookup that returned `cas`. `true` = this request owns the callout.
    pub fn mark_in_flight(&self, store: &dyn SharedData, fp: u64, until_ns: u64, cas: u32) -> bool {
        let b = encode_verdict_slot(fp, ST_IN_FLIGHT, until_ns);
        store.set(self.key(fp), &b, cas).is_ok()
    }

    /// Stores a verdict for `fp` until `expires_ns` (unconditional: the newest answer wins).
    pub fn put(
        &self,
        store: &dyn SharedData,
        fp: u64,
        verdict: BotVerdict,
        expires_ns: u64,
    ) -> Result<(), StoreError> {
        let st = match verdict {
            BotVerdict::Verified => ST_VERIFIED,
            BotVerdict::Spoofed => ST_SPOOFED,
            BotVerdict::Unknown => ST_UNKNOWN,
        };
        store.set(self.key(fp), &encode_verdict_slot(fp, st, expires_ns), 0)
    }

    /// Remembers a failed callout for `fp` until `expires_ns`.
    pub fn put_error(
        &self,
        store: &dyn SharedData,
        fp: u64,
        expires_ns: u64,
    ) -> Result<(), StoreError> {
        store.set(
            self.key(fp),
            &encode_verdict_slot(fp, ST_ERROR, expires_ns),
            0,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::BotEntry;
    use crate::store::mem::{Fault, MemStore};

    fn ip(s: &str) -> IpAddr {
        s.parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    #[test]
    fn verdicts_reclass_only_claims_that_need_verification() {
        let g = BotEntry {
            id: "googlebot".into(),
            ua_contains: vec!["googlebot".into()],
            class: Class::SearchCrawler,
            verify: true,
        };
        let claim = Classification {
            bot: Some(&g),
            class: Class::UnverifiedBot,
        };
        assert_eq!(reclass(&claim, BotVerdict::Verified), Class::SearchCrawler);
        assert_eq!(reclass(&claim, BotVerdict::Spoofed), Class::Spoofed);
        assert_eq!(reclass(&claim, BotVerdict::Unknown), Class::UnverifiedBot);
        let human = Classification {
            bot: None,
            class: Class::Human,
        };
        assert_eq!(reclass(&human, BotVerdict::Spoofed), Class::Human);
    }

    #[test]
    fn request_path_follows_the_contract() {
        assert_eq!(
            request_path(ip("66.249.66.1"), "googlebot"),
            "/v1/verify?ip=66.249.66.1&bot=googlebot"
        );
        assert_eq!(
            request_path(ip("2001:db8::1"), "gptbot"),
            "/v1/verify?ip=2001:db8::1&bot=gptbot"
        );
    }

    #[test]
    fn parses_well_formed_answers() {
        let body = br#"{"ip":"66.249.66.1","bot":"googlebot","verdict":"verified","method":"fcrdns","host":"crawl-66-249-66-1.googlebot.com","ttl_s":86400}"#;
        assert_eq!(
            parse_response(Some(b"200"), body, ip("66.249.66.1"), "googlebot"),
            Ok(Answer {
                verdict: BotVerdict::Verified,
                ttl_s: 86400
            })
        );
        let body = br#"{"ip":"2001:db8::1","bot":"gptbot","verdict":"spoofed","method":"none","host":"","ttl_s":3600}"#;
        assert_eq!(
            parse_response(Some(b"200"), body, ip("2001:db8:0::1"), "gptbot"),
            Ok(Answer {
                verdict: BotVerdict::Spoofed,
                ttl_s: 3600
            })
        );
    }

    #[test]
    fn every_bad_answer_is_a_verifier_error() {
        let a = ip("1.2.3.4");
        assert_eq!(
            parse_response(None, b"", a, "x"),
            Err(VerifyError::NoResponse)
        );
        assert_eq!(
            parse_response(Some(b"503"), b"{}", a, "x"),
            Err(VerifyError::Status("503".into()))
        );
        for body in [
            &b""[..],
            b"not json",
            b"{}",
            br#"{"ip":"1.2.3.4","bot":"x","verdict":"maybe","ttl_s":1}"#,
            br#"{"ip":"1.2.3.4","bot":"x","verdict":"verified","ttl_s":-1}"#,
            br#"{"ip":"1.2.3.5","bot":"x","verdict":"verified","ttl_s":1}"#,
            br#"{"ip":"1.2.3.4","bot":"y","verdict":"verified","ttl_s":1}"#,
            b"\xff\xfe",
        ] {
            assert!(
                matches!(
                    parse_response(Some(b"200"), body, a, "x"),
                    Err(VerifyError::Body(_))
                ),
                "{body:?}"
            );
        }
    }

    #[test]
    fn cache_expires_and_in_flight_marker_is_exclusive() {
        let store = MemStore::default();
        let c = VerdictCache::new(64);
        let fp = 0xfeed;
        let Cached::Miss { cas } = c.lookup(&store, fp, 100) else {
            panic!("empty cache must miss");
        };
        assert!(c.mark_in_flight(&store, fp, 200, cas));
        assert_eq!(c.lookup(&store, fp, 150), Cached::InFlight);
        // A second worker that read the slot before the mark loses the race.
        assert!(!c.mark_in_flight(&store, fp, 200, 999));
        // The marker expires (callout lost), so a later request may call out again.
        assert!(matches!(c.lookup(&store, fp, 200), Cached::Miss { .. }));
        assert_eq!(c.put(&store, fp, BotVerdict::Verified, 1_000), Ok(()));
        assert_eq!(
            c.lookup(&store, fp, 999),
            Cached::Fresh(BotVerdict::Verified)
        );
        assert!(matches!(c.lookup(&store, fp, 1_000), Cached::Miss { .. }));
        assert_eq!(c.put_error(&store, fp, 2_000), Ok(()));
        assert_eq!(c.lookup(&store, fp, 1_500), Cached::Error);
        // Another claim hashing to the same slot is a miss, not a false verdict.
        assert!(matches!(
            c.lookup(&store, fp + 64, 500),
            Cached::Miss { .. }
        ));
    }

    #[test]
    fn faulty_store_reads_as_miss() {
        let store = MemStore::default();
        let c = VerdictCache::new(8);
        assert_eq!(c.put(&store, 5, BotVerdict::Verified, 1_000), Ok(()));
        store.fault.set(Fault::Truncate);
        assert!(matches!(c.lookup(&store, 5, 1), Cached::Miss { .. }));
        store.fault.set(Fault::Error);
        assert_eq!(c.lookup(&store, 5, 1), Cached::Miss { cas: 0 });
        assert!(!c.mark_in_flight(&store, 5, 10, 0));
    }

    #[test]
    fn slot_encoding_roundtrip() {
        let b = encode_verdict_slot(7, ST_SPOOFED, 9);
        assert_eq!(decode_verdict_slot(&b), Some((7, ST_SPOOFED, 9)));
        assert_eq!(decode_verdict_slot(b.get(..17).unwrap_or_default()), None);
    }
}
