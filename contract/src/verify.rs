//! The verifier contract (filter <-> sidecar):
//! `GET /v1/verify?ip=<ip>&bot=<bot id>` -> `200` with an [`Answer`] as JSON,
//! `{"ip":"..","bot":"..","verdict":"verified"|"spoofed"|"unknown","method":"fcrdns"|"ip_range"|"none","host":"..","ttl_s":N}`.
//!
//! `unknown` means "no method could decide" (an unlisted bot, range files never loaded). A
//! claim the sidecar could not check now (DNS timeout, SERVFAIL, no nameserver) gets `503`,
//! not a verdict. Anything but a well-formed 200 is a verifier error; what the filter does
//! about it is its own policy, not part of the contract.
//!
//! Compatibility rule, so that a newer sidecar never unverifies crawlers on an older filter
//! (or the other way round): a reader ignores fields it does not know, reads a missing
//! `method` as `none` and a missing `host` as `""`, and carries a `method` string it does not
//! know as [`Method::Other`] (a `method` that is not a string is malformed) (the method is information; the verdict decides). `verdict`
//! keeps exactly its three values: what a new kind of answer needs goes into a new field,
//! never into a new verdict value, which a reader refuses (a verifier error, never a
//! verdict).

use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// The path of the verify endpoint.
pub const PATH: &str = "/v1/verify";

/// The request target of a verify request: `/v1/verify?ip=<ip>&bot=<bot id>`.
///
/// `bot` must be a valid bot id ([`crate::bot_id::is_valid_bot_id`]: `[a-z0-9._-]`) and IPs
/// print without reserved characters, so nothing needs escaping beyond IPv6 colons, which
/// RFC 3986 allows in a query.
pub fn request_path(ip: IpAddr, bot: &str) -> String {
    format!("{PATH}?ip={ip}&bot={bot}")
}

/// The claim `(ip, bot)` of a request target as [`request_path`] writes it, as text (neither
/// parsed nor checked); `None` for any other target. For offline tools that answer the
/// filter's callouts themselves (the sidecar's HTTP server reads the query its own way).
pub fn claim_of_request_path(target: &str) -> Option<(&str, &str)> {
    target
        .strip_prefix(PATH)?
        .strip_prefix("?ip=")?
        .split_once("&bot=")
}

/// The verifier's answer about one (IP, bot id) claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// FCrDNS or published IP ranges confirm the claim.
    Verified,
    /// The claim was checked and fails.
    Spoofed,
    /// No method could decide (unlisted bot, no method, no data); a DNS failure is a `503`.
    Unknown,
}

impl Verdict {
    /// Every verdict.
    pub const ALL: [Verdict; 3] = [Verdict::Verified, Verdict::Spoofed, Verdict::Unknown];

    /// The wire spelling, also used in stats and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Verified => "verified",
            Verdict::Spoofed => "spoofed",
            Verdict::Unknown => "unknown",
        }
    }

    /// Parses the wire spelling; `None` for anything else.
    pub fn parse(text: &str) -> Option<Verdict> {
        Verdict::ALL.into_iter().find(|v| v.as_str() == text)
    }
}

/// Which method produced a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Forward-confirmed reverse DNS.
    Fcrdns,
    /// The bot operator's published IP ranges.
    IpRange,
    /// No method applied (unlisted bot, or a bot without a usable method).
    #[default]
    None,
    /// A method this reader does not know (a newer sidecar's): read, never sent.
    #[serde(other)]
    Other,
}

impl Method {
    /// Every method a sidecar of this version sends (not [`Method::Other`]).
    pub const ALL: [Method; 3] = [Method::Fcrdns, Method::IpRange, Method::None];

    /// The wire spelling, also used in metric labels (`other` for [`Method::Other`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Fcrdns => "fcrdns",
            Method::IpRange => "ip_range",
            Method::None => "none",
            Method::Other => "other",
        }
    }
}

/// The JSON body of a `200` from `GET /v1/verify`. Fields serialise in contract order.
///
/// The sidecar always writes every field. A reader needs only `ip`, `bot`, `verdict` and
/// `ttl_s`: a missing `method` reads as `none`, a missing `host` as `""`, and unknown fields
/// are ignored, so either side can grow the answer without breaking the other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// The address checked, canonical form (an IPv4-mapped IPv6 address is shown as IPv4).
    pub ip: String,
    /// The bot id checked, lower case.
    pub bot: String,
    /// The verdict.
    pub verdict: Verdict,
    /// The method that decided (or failed to).
    #[serde(default)]
    pub method: Method,
    /// The PTR name that passed FCrDNS, else `""`.
    #[serde(default)]
    pub host: String,
    /// How long the caller may cache this answer, in seconds.
    pub ttl_s: u64,
}

impl Answer {
    /// The answer as JSON text (what the sidecar sends).
    pub fn to_json(&self) -> String {
        // Only strings, integers and unit variants: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses an answer body; `Err` carries serde_json's message.
    pub fn from_json(body: &[u8]) -> Result<Answer, String> {
        serde_json::from_slice(body).map_err(|e| e.to_string())
    }

    /// Whether this answers the claim (`ip`, `bot`): `bot` is the same id and `ip` the same
    /// address, whichever way it is written (`::ffff:1.2.3.4` is `1.2.3.4`, IPv6 in any case
    /// and compression).
    pub fn is_for(&self, ip: IpAddr, bot: &str) -> bool {
        self.bot == bot
            && self
                .ip
                .parse::<IpAddr>()
                .is_ok_and(|a| a.to_canonical() == ip.to_canonical())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
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
    fn a_request_paths_claim_reads_back() {
        for (addr, bot) in [("66.249.66.1", "googlebot"), ("2001:db8::1", "gptbot")] {
            let path = request_path(ip(addr), bot);
            assert_eq!(claim_of_request_path(&path), Some((addr, bot)));
        }
        assert_eq!(claim_of_request_path("/v1/ranges?ip=1.2.3.4&bot=x"), None);
        assert_eq!(claim_of_request_path("/v1/verify?ip=1.2.3.4"), None);
        assert_eq!(claim_of_request_path("/v1/verify?bot=x&ip=1.2.3.4"), None);
    }

    #[test]
    fn answer_serialises_every_field_in_contract_order() {
        let a = Answer {
            ip: "66.249.66.1".into(),
            bot: "googlebot".into(),
            verdict: Verdict::Verified,
            method: Method::Fcrdns,
            host: "crawl-66-249-66-1.googlebot.com".into(),
            ttl_s: 86400,
        };
        assert_eq!(
            a.to_json(),
            r#"{"ip":"66.249.66.1","bot":"googlebot","verdict":"verified","method":"fcrdns","host":"crawl-66-249-66-1.googlebot.com","ttl_s":86400}"#
        );
        assert_eq!(Answer::from_json(a.to_json().as_bytes()), Ok(a));
    }

    fn json<T: Serialize>(value: &T) -> String {
        serde_json::to_string(value).unwrap_or_default()
    }

    #[test]
    fn wire_spellings() {
        assert_eq!(
            Verdict::ALL.map(|v| json(&v)),
            [r#""verified""#, r#""spoofed""#, r#""unknown""#]
        );
        assert_eq!(
            Method::ALL.map(|m| json(&m)),
            [r#""fcrdns""#, r#""ip_range""#, r#""none""#]
        );
        for v in Verdict::ALL {
            assert_eq!(json(&v), format!("\"{}\"", v.as_str()));
            assert_eq!(Verdict::parse(v.as_str()), Some(v));
        }
        for m in Method::ALL {
            assert_eq!(json(&m), format!("\"{}\"", m.as_str()));
        }
        assert_eq!(Verdict::parse("Verified"), None);
    }

    #[test]
    fn method_and_host_may_be_absent_and_unknown_fields_are_ignored() {
        let a = Answer::from_json(
            br#"{"ttl_s":30,"extra":[1],"verdict":"unknown","bot":"x","ip":"1.2.3.4"}"#,
        );
        assert_eq!(
            a,
            Ok(Answer {
                ip: "1.2.3.4".into(),
                bot: "x".into(),
                verdict: Verdict::Unknown,
                method: Method::None,
                host: String::new(),
                ttl_s: 30,
            })
        );
    }

    #[test]
    fn a_newer_sidecars_method_is_carried_as_other_and_its_verdict_still_counts() {
        let a = Answer::from_json(
            br#"{"ip":"1.2.3.4","bot":"x","verdict":"verified","method":"web_bot_auth","ttl_s":1}"#,
        );
        assert_eq!(
            a.map(|a| (a.verdict, a.method)),
            Ok((Verdict::Verified, Method::Other))
        );
        // A new verdict value is no verdict: refused, a verifier error for the reader.
        assert!(
            Answer::from_json(br#"{"ip":"1.2.3.4","bot":"x","verdict":"revoked","ttl_s":1}"#)
                .is_err()
        );
        assert_eq!(Method::Other.as_str(), "other");
    }

    #[test]
    fn malformed_answers_do_not_parse() {
        for body in [
            &b""[..],
            b"{}",
            br#"{"ip":"1.2.3.4","bot":"x","verdict":"maybe","ttl_s":1}"#,
            br#"{"ip":"1.2.3.4","bot":"x","verdict":"verified","ttl_s":-1}"#,
            br#"{"ip":"1.2.3.4","verdict":"verified","ttl_s":1}"#,
            b"\xff\xfe",
        ] {
            assert!(Answer::from_json(body).is_err(), "{body:?}");
        }
    }

    #[test]
    fn is_for_compares_canonical_addresses_and_exact_ids() {
        let a = |ip: &str| Answer {
            ip: ip.into(),
            bot: "gptbot".into(),
            verdict: Verdict::Spoofed,
            method: Method::None,
            host: String::new(),
            ttl_s: 1,
        };
        assert!(a("2001:db8::1").is_for(ip("2001:DB8:0::1"), "gptbot"));
        assert!(a("::ffff:1.2.3.4").is_for(ip("1.2.3.4"), "gptbot"));
        assert!(a("1.2.3.4").is_for(ip("::ffff:1.2.3.4"), "gptbot"));
        assert!(!a("1.2.3.5").is_for(ip("1.2.3.4"), "gptbot"));
        assert!(!a("1.2.3.4").is_for(ip("1.2.3.4"), "GPTBot"));
        assert!(!a("not an ip").is_for(ip("1.2.3.4"), "gptbot"));
    }
}
