//! The verifier contract, filter side: parsing an answer and what a verdict means for a
//! request's class. The wire types (`GET /v1/verify?ip=<ip>&bot=<bot id>`, the JSON
//! [`Answer`](crawlguard_contract::verify::Answer), [`Verdict`]) are the contract crate's,
//! shared with the sidecar (`contract/src/verify.rs`; the HTTP API in `sidecar/README.md`). The cache and the callout
//! orchestration live in `verdict_cache.rs` and `verification.rs`.

use crate::identity::class::Class;
use crawlguard_contract::verify as wire;
use std::net::IpAddr;

/// The verifier's answer about one claim (a contract type).
pub use crawlguard_contract::verify::Verdict;

/// The class of a claim to be `bot_class` once it has `verdict`.
pub fn class_for(verdict: Verdict, bot_class: Class) -> Class {
    match verdict {
        Verdict::Verified => bot_class,
        Verdict::Spoofed => Class::Spoofed,
        Verdict::Unknown => Class::UnverifiedBot,
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
    /// Not asked: this worker already has `flights::MAX_FLIGHTS` claims in flight.
    Overloaded,
}

impl VerifyError {
    /// Short kind for logs: `dispatch`, `no_response`, `status`, `body`, `overloaded`.
    pub fn kind(&self) -> &'static str {
        match self {
            VerifyError::Dispatch => "dispatch",
            VerifyError::NoResponse => "no_response",
            VerifyError::Status(_) => "status",
            VerifyError::Body(_) => "body",
            VerifyError::Overloaded => "overloaded",
        }
    }
}

/// What the filter keeps of a well-formed verifier answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckedAnswer {
    /// The verdict.
    pub verdict: Verdict,
    /// How long it may be cached, seconds (as sent; the caller clamps it).
    pub ttl_s: u64,
}

/// Parses a verifier response: `status` is the `:status` header (`None` when the call failed
/// without a response), `body` the response body (at most a few hundred bytes are read).
/// The answer must be for `ip` and `bot` ([`wire::Answer::is_for`]).
pub fn parse_response(
    status: Option<&[u8]>,
    body: &[u8],
    ip: IpAddr,
    bot: &str,
) -> Result<CheckedAnswer, VerifyError> {
    let status = status.ok_or(VerifyError::NoResponse)?;
    if status != b"200" {
        return Err(VerifyError::Status(
            String::from_utf8_lossy(status).chars().take(16).collect(),
        ));
    }
    let w = wire::Answer::from_json(body)
        .map_err(|e| VerifyError::Body(e.chars().take(120).collect()))?;
    if !w.is_for(ip, bot) {
        return Err(VerifyError::Body(format!(
            "answer for ip {:.48} bot {:.64}, asked {ip} {bot}",
            w.ip, w.bot
        )));
    }
    Ok(CheckedAnswer {
        verdict: w.verdict,
        ttl_s: w.ttl_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    #[test]
    fn a_verdict_gives_the_bot_class_spoofed_or_unverified_bot() {
        let c = Class::SearchCrawler;
        assert_eq!(class_for(Verdict::Verified, c), Class::SearchCrawler);
        assert_eq!(class_for(Verdict::Spoofed, c), Class::Spoofed);
        assert_eq!(class_for(Verdict::Unknown, c), Class::UnverifiedBot);
        assert_eq!(
            class_for(Verdict::Verified, Class::AiRetriever),
            Class::AiRetriever
        );
    }

    #[test]
    fn parses_well_formed_answers() {
        let body = br#"{"ip":"66.249.66.1","bot":"googlebot","verdict":"verified","method":"fcrdns","host":"crawl-66-249-66-1.googlebot.com","ttl_s":86400}"#;
        assert_eq!(
            parse_response(Some(b"200"), body, ip("66.249.66.1"), "googlebot"),
            Ok(CheckedAnswer {
                verdict: Verdict::Verified,
                ttl_s: 86400
            })
        );
        let body = br#"{"ip":"2001:db8::1","bot":"gptbot","verdict":"spoofed","method":"none","host":"","ttl_s":3600}"#;
        assert_eq!(
            parse_response(Some(b"200"), body, ip("2001:db8:0::1"), "gptbot"),
            Ok(CheckedAnswer {
                verdict: Verdict::Spoofed,
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
}
