//! Forward-confirmed reverse DNS: PTR names within a bot's domains, each confirmed by its
//! A/AAAA answer, deciding only on definite answers.

use std::collections::HashSet;
use std::net::IpAddr;

use super::{Method, Outcome, Verdict, VerifyError};
use crate::domain::{matches_any, normalize_name};
use crate::metrics::Metrics;
use crate::resolver::Resolve;

/// FCrDNS for one address against one bot's domains.
///
/// Every PTR name is considered; only names within the bot's domains are forward-checked
/// (at most `max_names` of them, so a hostile reverse zone cannot make us send hundreds of
/// queries). A name passes when its A (IPv4) or AAAA (IPv6) answer contains `ip`.
/// Only definite answers decide: `verified` when a name passes, `spoofed` on NXDOMAIN or no
/// data for the PTR, no PTR name in the domains, or forward answers (A/AAAA, NXDOMAIN, no
/// data) that all fail to confirm. A failure that is no answer (timeout, SERVFAIL, REFUSED,
/// unreachable server) is a [`VerifyError`] unless another name passed.
pub async fn fcrdns<R: Resolve>(
    resolver: &R,
    metrics: &Metrics,
    ip: IpAddr,
    domains: &[String],
    max_names: usize,
) -> Result<Outcome, VerifyError> {
    let ptr_type = "ptr";
    metrics.dns_query(ptr_type);
    let names = match resolver.reverse(ip).await {
        Ok(names) => names,
        Err(e) => {
            metrics.dns_error(ptr_type, e.kind.as_str());
            tracing::debug!(%ip, error = %e, "PTR lookup failed");
            if !e.kind.is_definite() {
                return Err(VerifyError::Dns {
                    query: ptr_type,
                    failure: e,
                });
            }
            return Ok(Outcome::new(Verdict::Spoofed, Method::Fcrdns));
        }
    };
    let mut seen = HashSet::new();
    let candidates: Vec<String> = names
        .iter()
        .map(|n| normalize_name(n))
        .filter(|n| matches_any(n, domains) && seen.insert(n.clone()))
        .take(max_names)
        .collect();
    if candidates.is_empty() {
        tracing::debug!(%ip, ?names, "no PTR name in the bot's domains");
        return Ok(Outcome::new(Verdict::Spoofed, Method::Fcrdns));
    }
    let fwd_type = if ip.is_ipv4() { "a" } else { "aaaa" };
    let mut no_answer = None;
    for name in candidates {
        metrics.dns_query(fwd_type);
        match resolver.forward(&name, ip).await {
            Ok(addrs) if addrs.iter().any(|a| a.to_canonical() == ip) => {
                return Ok(Outcome {
                    verdict: Verdict::Verified,
                    method: Method::Fcrdns,
                    host: name,
                });
            }
            Ok(addrs) => tracing::debug!(%ip, %name, ?addrs, "forward lookup does not confirm"),
            Err(e) => {
                metrics.dns_error(fwd_type, e.kind.as_str());
                tracing::debug!(%ip, %name, error = %e, "forward lookup failed");
                if !e.kind.is_definite() && no_answer.is_none() {
                    no_answer = Some(e);
                }
            }
        }
    }
    match no_answer {
        // A name we could not check might have passed.
        Some(failure) => Err(VerifyError::Dns {
            query: fwd_type,
            failure,
        }),
        None => Ok(Outcome::new(Verdict::Spoofed, Method::Fcrdns)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{Method, Verdict, VerifyError};
    use crate::ranges::RangeStore;
    use crate::resolver::DnsErrorKind;
    use std::net::IpAddr;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    #[tokio::test]
    async fn verified_when_ptr_in_domain_and_forward_confirms() {
        let r = FakeResolver::default()
            .ptr(IP, Ok(&["Crawl-66-249-66-1.GoogleBot.com."]))
            .fwd("crawl-66-249-66-1.googlebot.com", Ok(&["66.249.66.1"]));
        let v = verifier(r, vec![("googlebot", google())]);
        let a = v.verify(IP.parse().unwrap(), "googlebot").await.unwrap();
        expect(
            &a,
            Verdict::Verified,
            Method::Fcrdns,
            "crawl-66-249-66-1.googlebot.com",
            86_400,
        );
        assert_eq!((a.ip.as_str(), a.bot.as_str()), (IP, "googlebot"));
    }

    #[tokio::test]
    async fn spoofed_when_no_ptr_name_in_domains() {
        let r = FakeResolver::default().ptr(
            IP,
            Ok(&["host.evilgooglebot.com", "googlebot.com.evil.net"]),
        );
        let v = verifier(r, vec![("googlebot", google())]);
        let a = v.verify(IP.parse().unwrap(), "googlebot").await.unwrap();
        expect(&a, Verdict::Spoofed, Method::Fcrdns, "", 3_600);
        // Look-alike names are never forward-checked.
        assert_eq!(v.resolver.forward_calls.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn spoofed_when_forward_returns_another_ip() {
        let r = FakeResolver::default()
            .ptr(IP, Ok(&["liar.googlebot.com"]))
            .fwd("liar.googlebot.com", Ok(&["66.249.66.2"]));
        let v = verifier(r, vec![("googlebot", google())]);
        expect(
            &v.verify(IP.parse().unwrap(), "googlebot").await.unwrap(),
            Verdict::Spoofed,
            Method::Fcrdns,
            "",
            3_600,
        );
    }

    #[tokio::test]
    async fn spoofed_on_ptr_nxdomain_and_nodata() {
        for kind in [DnsErrorKind::Nxdomain, DnsErrorKind::NoData] {
            let r = FakeResolver::default().ptr(IP, Err(kind));
            let v = verifier(r, vec![("googlebot", google())]);
            expect(
                &v.verify(IP.parse().unwrap(), "googlebot").await.unwrap(),
                Verdict::Spoofed,
                Method::Fcrdns,
                "",
                3_600,
            );
        }
    }

    #[tokio::test]
    async fn transient_ptr_failures_are_errors_and_not_cached() {
        for kind in [
            DnsErrorKind::Timeout,
            DnsErrorKind::Servfail,
            DnsErrorKind::Refused,
            DnsErrorKind::Connection,
            DnsErrorKind::Other,
        ] {
            let r = FakeResolver::default().ptr(IP, Err(kind));
            let v = verifier(r, vec![("googlebot", google())]);
            let e = v.verify(IP.parse().unwrap(), "googlebot").await;
            assert_eq!(
                e,
                Err(VerifyError::Dns {
                    query: "ptr",
                    failure: fail(kind)
                })
            );
            assert_eq!(
                e.unwrap_err().to_string(),
                format!("dns ptr query got no answer: {}: scripted", kind.as_str())
            );
            // Not cached: the next query asks DNS again.
            assert!(v.verify(IP.parse().unwrap(), "googlebot").await.is_err());
            assert_eq!(v.resolver.reverse_calls.load(Ordering::SeqCst), 2);
            let text = v.metrics().encode();
            for series in [
                format!(
                    "crawlguard_sidecar_dns_errors_total{{type=\"ptr\",kind=\"{}\"}} 2",
                    kind.as_str()
                ),
                "crawlguard_sidecar_verify_errors_total 2".to_string(),
                "crawlguard_sidecar_cache_misses_total 0".to_string(),
            ] {
                assert!(text.contains(&series), "{series} not in\n{text}");
            }
            assert!(!text.contains("verdict=\"unknown\""), "{text}");
        }
    }

    #[tokio::test]
    async fn forward_servfail_is_an_error() {
        let ip: IpAddr = IP.parse().unwrap();
        let r = FakeResolver::default()
            .ptr(IP, Ok(&["crawl.googlebot.com"]))
            .fwd("crawl.googlebot.com", Err(DnsErrorKind::Servfail));
        let v = verifier(r, vec![("googlebot", google())]);
        assert_eq!(
            v.verify(ip, "googlebot").await,
            Err(VerifyError::Dns {
                query: "a",
                failure: fail(DnsErrorKind::Servfail)
            })
        );
    }

    #[tokio::test]
    async fn one_passing_name_among_several_verifies() {
        let r = FakeResolver::default()
            .ptr(
                IP,
                Ok(&[
                    "other.example.net",
                    "evilgooglebot.com",
                    "liar.googlebot.com",
                    "crawl-1.google.com",
                ]),
            )
            .fwd("liar.googlebot.com", Ok(&["10.0.0.1"]))
            .fwd("crawl-1.google.com", Ok(&["10.0.0.2", "66.249.66.1"]));
        let v = verifier(r, vec![("googlebot", google())]);
        let a = v.verify(IP.parse().unwrap(), "googlebot").await.unwrap();
        expect(
            &a,
            Verdict::Verified,
            Method::Fcrdns,
            "crawl-1.google.com",
            86_400,
        );
        assert_eq!(v.resolver.forward_calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn forward_timeout_without_pass_is_an_error_but_a_pass_wins() {
        let r = FakeResolver::default()
            .ptr(IP, Ok(&["a.googlebot.com", "b.googlebot.com"]))
            .fwd("a.googlebot.com", Err(DnsErrorKind::Timeout))
            .fwd("b.googlebot.com", Err(DnsErrorKind::Nxdomain));
        let v = verifier(r, vec![("googlebot", google())]);
        assert_eq!(
            v.verify(IP.parse().unwrap(), "googlebot").await,
            Err(VerifyError::Dns {
                query: "a",
                failure: fail(DnsErrorKind::Timeout)
            })
        );

        let r = FakeResolver::default()
            .ptr(IP, Ok(&["a.googlebot.com", "b.googlebot.com"]))
            .fwd("a.googlebot.com", Err(DnsErrorKind::Servfail))
            .fwd("b.googlebot.com", Ok(&["66.249.66.1"]));
        let v = verifier(r, vec![("googlebot", google())]);
        expect(
            &v.verify(IP.parse().unwrap(), "googlebot").await.unwrap(),
            Verdict::Verified,
            Method::Fcrdns,
            "b.googlebot.com",
            86_400,
        );
    }

    #[tokio::test]
    async fn forward_nodata_everywhere_is_spoofed() {
        let r = FakeResolver::default()
            .ptr(IP, Ok(&["a.googlebot.com"]))
            .fwd("a.googlebot.com", Err(DnsErrorKind::NoData));
        let v = verifier(r, vec![("googlebot", google())]);
        expect(
            &v.verify(IP.parse().unwrap(), "googlebot").await.unwrap(),
            Verdict::Spoofed,
            Method::Fcrdns,
            "",
            3_600,
        );
    }

    #[tokio::test]
    async fn ptr_names_checked_are_capped() {
        let names: Vec<String> = (0..20).map(|i| format!("h{i}.googlebot.com")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let r = FakeResolver::default().ptr(IP, Ok(&refs));
        let mut s = settings();
        s.max_ptr_names = 3;
        let v = verifier_with(
            r,
            vec![("googlebot", google())],
            Arc::new(RangeStore::default()),
            s,
        );
        expect(
            &v.verify(IP.parse().unwrap(), "googlebot").await.unwrap(),
            Verdict::Spoofed,
            Method::Fcrdns,
            "",
            3_600,
        );
        assert_eq!(v.resolver.forward_calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn ipv6_fcrdns() {
        let ip6 = "2001:4860:4801:10::1";
        let r = FakeResolver::default()
            .ptr(ip6, Ok(&["crawl-v6.googlebot.com."]))
            .fwd("crawl-v6.googlebot.com", Ok(&["2001:4860:4801:10:0:0:0:1"]));
        let v = verifier(r, vec![("googlebot", google())]);
        let a = v.verify(ip6.parse().unwrap(), "googlebot").await.unwrap();
        expect(
            &a,
            Verdict::Verified,
            Method::Fcrdns,
            "crawl-v6.googlebot.com",
            86_400,
        );
        assert_eq!(a.ip, "2001:4860:4801:10::1");
    }
}
