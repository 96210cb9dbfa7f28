//! DNS lookup slots: at most `dns.max_concurrent_lookups` resolutions at once, plus reserved
//! slots for claims FCrDNS verified before, so a flood cannot starve a real crawler.

use std::net::IpAddr;
use std::time::Duration;

use super::{fcrdns, Outcome, Verdict, Verifier, VerifyError};
use crate::config::BotMethods;
use crate::resolver::Resolve;

/// How long a claim FCrDNS verified keeps its priority for lookup slots: a week, longer
/// than any verdict lives, so a crawler whose verdict expired during a flood still has it.
pub const VERIFIED_MEMORY: Duration = Duration::from_secs(7 * 86_400);

/// Lookup slots reserved for claims verified before, besides `dns.max_concurrent_lookups`:
/// a quarter of them, at least one.
pub fn reserved_lookup_slots(max_concurrent_lookups: usize) -> usize {
    (max_concurrent_lookups / 4).max(1)
}

impl<R: Resolve> Verifier<R> {
    /// FCrDNS with a lookup slot ([`VerifyError::Overloaded`] when none frees up in time). A
    /// claim verified before may also take one of the reserved slots, whichever frees first.
    pub(super) async fn resolve(
        &self,
        ip: IpAddr,
        bot: &str,
        methods: &BotMethods,
    ) -> Result<Outcome, VerifyError> {
        let key = (ip, bot.to_string());
        let known = self.verified_before.contains_key(&key);
        let permit = tokio::time::timeout(self.settings.lookup_slot_wait, async {
            if known {
                tokio::select! {
                    p = self.lookups.acquire() => p,
                    p = self.reserved_lookups.acquire() => p,
                }
            } else {
                self.lookups.acquire().await
            }
        })
        .await;
        let Ok(Ok(_permit)) = permit else {
            // Overloaded: better a quick error (the filter keeps a stale verdict) than a
            // queue that outlives the filter's callout timeout.
            self.metrics.lookups_rejected.inc();
            return Err(VerifyError::Overloaded);
        };
        let outcome = fcrdns(
            self.resolver.as_ref(),
            &self.metrics,
            ip,
            &methods.domains,
            self.settings.max_ptr_names,
        )
        .await?;
        if outcome.verdict == Verdict::Verified {
            self.verified_before.insert(key, ()).await;
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{Method, Verdict, VerifyError};
    use super::*;
    use crate::ranges::RangeStore;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;

    #[tokio::test]
    async fn a_claim_verified_before_gets_a_reserved_slot_while_a_flood_holds_the_others() {
        // 66.249.66.9's zone never answers in time (the flood); IP is a real crawler.
        let mut r = FakeResolver::default()
            .ptr(IP, Ok(&["crawl.googlebot.com"]))
            .ptr("66.249.66.9", Ok(&["slow.example.net"]))
            .fwd("crawl.googlebot.com", Ok(&[IP]));
        r.delay = Duration::from_millis(300);
        let mut s = settings();
        s.max_concurrent_lookups = 1;
        s.lookup_slot_wait = Duration::from_millis(100);
        assert_eq!(reserved_lookup_slots(1), 1);
        let v = Arc::new(verifier_with(
            r,
            vec![("googlebot", google())],
            Arc::new(RangeStore::default()),
            s,
        ));
        // Verified once; then its verdict expires (dropped from the cache).
        let first = v.verify(IP.parse().unwrap(), "googlebot").await.unwrap();
        assert_eq!(first.verdict, Verdict::Verified);
        v.cache.invalidate_all();
        v.cache.run_pending_tasks().await;
        // The flood takes the only general slot.
        let flood = {
            let v = v.clone();
            tokio::spawn(async move { v.verify("66.249.66.9".parse().unwrap(), "googlebot").await })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while v.lookups.available_permits() > 0 {
            assert!(
                Instant::now() < deadline,
                "the flood's lookup never started"
            );
            tokio::task::yield_now().await;
        }
        // A claim never verified waits in vain; the crawler gets the reserved slot.
        let stranger = v.verify("66.249.66.10".parse().unwrap(), "googlebot").await;
        assert_eq!(stranger, Err(VerifyError::Overloaded));
        let again = v.verify(IP.parse().unwrap(), "googlebot").await.unwrap();
        assert_eq!(again.verdict, Verdict::Verified);
        let _ = flood.await;
    }

    #[tokio::test]
    async fn no_lookup_slot_in_time_is_an_error() {
        let mut r = FakeResolver::default()
            .ptr(IP, Ok(&["crawl.googlebot.com"]))
            .ptr("66.249.66.2", Ok(&["crawl.googlebot.com"]));
        r.delay = Duration::from_millis(500);
        let mut s = settings();
        s.max_concurrent_lookups = 1;
        s.lookup_slot_wait = Duration::from_millis(50);
        let v = Arc::new(verifier_with(
            r,
            vec![("googlebot", google())],
            Arc::new(RangeStore::default()),
            s,
        ));
        let slow = {
            let v = v.clone();
            tokio::spawn(async move { v.verify(IP.parse().unwrap(), "googlebot").await })
        };
        // The slow one holds the only slot once it has asked for the PTR.
        let deadline = Instant::now() + Duration::from_secs(10);
        while v.resolver.reverse_calls.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the first lookup never started");
            tokio::task::yield_now().await;
        }
        let a = v.verify("66.249.66.2".parse().unwrap(), "googlebot").await;
        assert_eq!(a, Err(VerifyError::Overloaded));
        let text = v.metrics().encode();
        assert!(
            text.contains("crawlguard_sidecar_lookups_rejected_total 1"),
            "{text}"
        );
        assert!(
            text.contains("crawlguard_sidecar_verify_errors_total 1"),
            "{text}"
        );
        // NXDOMAIN for the forward name: a definite answer.
        expect(
            &slow.await.unwrap().unwrap(),
            Verdict::Spoofed,
            Method::Fcrdns,
            "",
            3_600,
        );
    }
}
