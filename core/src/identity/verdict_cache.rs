//! Verdicts shared by every worker of one Envoy: per claim (full client IP, bot id) the last
//! verdict and how long it may be used, and per client prefix how many spoofed verdicts it
//! produced. Both live in [`SlotTable`]s in shared data, bounded by `verifier.cache_slots`.
//!
//! A verdict has three ages: *fresh* until its TTL (`min(ttl_s, max_ttl_s)`), then *stale*
//! for `verifier.stale_if_error_s` more: a stale verdict is used only when a new callout
//! fails (RFC 5861's stale-if-error, applied to crawler verdicts), so a verifier outage does
//! not hand a verified crawler to the unverified bucket. A failed callout also starts a
//! backoff (`error_ttl_s`) during which the claim is not called out again.

use crate::identity::verifier_answer::Verdict;
use crate::store::slot_table::{read_u64, write_u64, SlotTable, SlotValue};
use crate::store::{SharedData, StoreError, StoreFault};

/// Shared-data key prefix of claim slots.
pub const CLAIM_PREFIX: &str = "cg:v:";
/// Shared-data key prefix of prefix slots.
pub const PREFIX_PREFIX: &str = "cg:p:";

/// What is known about one claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClaimEntry {
    /// The last verdict the verifier gave (`None`: none yet, only a failed callout).
    pub verdict: Option<Verdict>,
    /// The verdict is fresh until then, ns since the Unix epoch.
    pub fresh_until_ns: u64,
    /// The verdict may stand in for a failed callout until then, ns.
    pub stale_until_ns: u64,
    /// No new callout for this claim before then (a recent one failed), ns.
    pub backoff_until_ns: u64,
}

impl ClaimEntry {
    /// The verdict if it is fresh at `now_ns`.
    pub fn fresh(&self, now_ns: u64) -> Option<Verdict> {
        self.verdict.filter(|_| now_ns < self.fresh_until_ns)
    }

    /// The verdict if it may stand in for a failed callout at `now_ns` (fresh or stale).
    pub fn usable_on_error(&self, now_ns: u64) -> Option<Verdict> {
        self.verdict.filter(|_| now_ns < self.stale_until_ns)
    }

    /// True while a failed callout's backoff runs.
    pub fn backing_off(&self, now_ns: u64) -> bool {
        now_ns < self.backoff_until_ns
    }
}

impl SlotValue for ClaimEntry {
    /// verdict (1) + fresh_until (8) + stale_until (8) + backoff_until (8).
    const LEN: usize = 25;
    const VERSION: u8 = 2;

    fn encode(&self, out: &mut [u8]) {
        if let Some(b) = out.first_mut() {
            *b = match self.verdict {
                None => 0,
                Some(Verdict::Verified) => 1,
                Some(Verdict::Spoofed) => 2,
                Some(Verdict::Unknown) => 3,
            };
        }
        write_u64(out, 1, self.fresh_until_ns);
        write_u64(out, 9, self.stale_until_ns);
        write_u64(out, 17, self.backoff_until_ns);
    }

    fn decode(b: &[u8]) -> Option<Self> {
        let verdict = match b.first()? {
            0 => None,
            1 => Some(Verdict::Verified),
            2 => Some(Verdict::Spoofed),
            3 => Some(Verdict::Unknown),
            _ => return None,
        };
        Some(ClaimEntry {
            verdict,
            fresh_until_ns: read_u64(b, 1)?,
            stale_until_ns: read_u64(b, 9)?,
            backoff_until_ns: read_u64(b, 17)?,
        })
    }

    /// Verified verdicts outrank everything (a flood of spoofed or failed claims cannot push
    /// a real crawler's verdict out), fresh ones more than stale ones; then fresh spoofed
    /// verdicts; then unknown verdicts and running backoffs; anything else is free.
    fn rank(&self, now_ns: u64) -> u8 {
        match (self.fresh(now_ns), self.usable_on_error(now_ns)) {
            (Some(Verdict::Verified), _) => 4,
            (_, Some(Verdict::Verified)) => 3,
            (Some(Verdict::Spoofed), _) => 2,
            (Some(Verdict::Unknown), _) => 1,
            _ if self.backing_off(now_ns) => 1,
            _ => 0,
        }
    }

    fn free_at_ns(&self) -> u64 {
        self.stale_until_ns.max(self.backoff_until_ns)
    }
}

/// Spoofed verdicts seen in one client prefix (the bucket key grouping:
/// `client_ip.ipv4_prefix_len` / `ipv6_prefix_len`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PrefixEntry {
    /// Spoofed verdicts counted.
    pub spoofed: u32,
    /// The count holds until then (the latest spoofed verdict's freshness), ns.
    pub until_ns: u64,
}

impl PrefixEntry {
    /// The spoofed count that holds at `now_ns`.
    pub fn spoofed_at(&self, now_ns: u64) -> u32 {
        if now_ns < self.until_ns {
            self.spoofed
        } else {
            0
        }
    }
}

impl SlotValue for PrefixEntry {
    /// spoofed (4) + until (8).
    const LEN: usize = 12;
    const VERSION: u8 = 1;

    fn encode(&self, out: &mut [u8]) {
        if let Some(dst) = out.get_mut(..4) {
            dst.copy_from_slice(&self.spoofed.to_le_bytes());
        }
        write_u64(out, 4, self.until_ns);
    }

    fn decode(b: &[u8]) -> Option<Self> {
        Some(PrefixEntry {
            spoofed: u32::from_le_bytes(b.get(..4)?.try_into().ok()?),
            until_ns: read_u64(b, 4)?,
        })
    }

    /// More spoofed verdicts rank higher; an expired count is free.
    fn rank(&self, now_ns: u64) -> u8 {
        match self.spoofed_at(now_ns) {
            0 => 0,
            n => u8::try_from(n).unwrap_or(u8::MAX),
        }
    }

    fn free_at_ns(&self) -> u64 {
        self.until_ns
    }
}

/// The claim and prefix tables.
#[derive(Debug, Clone)]
pub struct VerdictCache {
    claims: SlotTable<ClaimEntry>,
    prefixes: SlotTable<PrefixEntry>,
}

impl VerdictCache {
    /// `claim_slots` claim slots and a quarter as many prefix slots (at least 16).
    pub fn new(claim_slots: u32, cas_retries: u32) -> VerdictCache {
        VerdictCache {
            claims: SlotTable::new(CLAIM_PREFIX, claim_slots, cas_retries),
            prefixes: SlotTable::new(PREFIX_PREFIX, (claim_slots / 4).max(16), cas_retries),
        }
    }

    /// Slots of the claim table.
    pub fn claim_slots(&self) -> usize {
        self.claims.len()
    }

    /// Creates every missing slot (see [`SlotTable::precreate`]); returns slots created.
    pub fn precreate(&self, store: &dyn SharedData) -> Result<usize, StoreError> {
        Ok(self.claims.precreate(store)? + self.prefixes.precreate(store)?)
    }

    /// What is known about claim `claim_fp` (`None` when nothing, or the store failed: a
    /// miss only costs a callout).
    pub fn claim(&self, store: &dyn SharedData, claim_fp: u64, now_ns: u64) -> Option<ClaimEntry> {
        self.claims.get(store, claim_fp, now_ns).ok().flatten()
    }

    /// Spoofed verdicts counted for prefix `prefix_fp` at `now_ns` (0 on a store error).
    pub fn spoofed_in_prefix(&self, store: &dyn SharedData, prefix_fp: u64, now_ns: u64) -> u32 {
        self.prefixes
            .get(store, prefix_fp, now_ns)
            .ok()
            .flatten()
            .map_or(0, |p| p.spoofed_at(now_ns))
    }

    /// Records a verdict for `claim_fp`: fresh until `fresh_until_ns`, usable on error for
    /// `stale_for_ns` more; the backoff ends.
    pub fn put_verdict(
        &self,
        store: &dyn SharedData,
        claim_fp: u64,
        verdict: Verdict,
        now_ns: u64,
        fresh_until_ns: u64,
        stale_for_ns: u64,
    ) -> Result<(), StoreFault> {
        let entry = ClaimEntry {
            verdict: Some(verdict),
            fresh_until_ns,
            stale_until_ns: fresh_until_ns.saturating_add(stale_for_ns),
            backoff_until_ns: 0,
        };
        self.claims
            .measure_and_replace(store, claim_fp, now_ns, |_| ((), Some(entry)))
            .map(|_| ())
    }

    /// Records a failed callout for `claim_fp`: no new callout before `backoff_until_ns`;
    /// the last verdict is kept. Returns the entry as it stands (its verdict may stand in).
    pub fn put_error(
        &self,
        store: &dyn SharedData,
        claim_fp: u64,
        now_ns: u64,
        backoff_until_ns: u64,
    ) -> Option<ClaimEntry> {
        let mut seen = None;
        let _ = self
            .claims
            .measure_and_replace(store, claim_fp, now_ns, |e| {
                let e = ClaimEntry {
                    backoff_until_ns,
                    ..e.unwrap_or_default()
                };
                seen = Some(e);
                ((), Some(e))
            });
        // Even when the store refused the write, the caller may use what was read.
        seen
    }

    /// Counts one spoofed verdict in `prefix_fp`, holding until `until_ns` (extended, never
    /// shortened). Returns the new count.
    pub fn count_spoofed(
        &self,
        store: &dyn SharedData,
        prefix_fp: u64,
        now_ns: u64,
        until_ns: u64,
    ) -> Result<u32, StoreFault> {
        self.prefixes
            .measure_and_replace(store, prefix_fp, now_ns, |p| {
                let p = p.unwrap_or_default();
                let n = p.spoofed_at(now_ns).saturating_add(1);
                (
                    n,
                    Some(PrefixEntry {
                        spoofed: n,
                        until_ns: until_ns.max(p.until_ns),
                    }),
                )
            })
            .map(|(n, _)| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mem::{Fault, MemStore};

    const S: u64 = 1_000_000_000;

    fn cache(slots: u32) -> (VerdictCache, MemStore) {
        let c = VerdictCache::new(slots, 4);
        let s = MemStore::default();
        assert!(c.precreate(&s).is_ok());
        (c, s)
    }

    #[test]
    fn a_verdict_is_fresh_then_stale_then_gone() {
        let (c, s) = cache(64);
        assert_eq!(
            c.put_verdict(&s, 9, Verdict::Verified, 0, 10 * S, 100 * S),
            Ok(())
        );
        let e = c.claim(&s, 9, 5 * S).expect("entry");
        assert_eq!(e.fresh(5 * S), Some(Verdict::Verified));
        assert_eq!(e.fresh(10 * S), None);
        assert_eq!(e.usable_on_error(10 * S), Some(Verdict::Verified));
        assert_eq!(e.usable_on_error(110 * S - 1), Some(Verdict::Verified));
        assert_eq!(e.usable_on_error(110 * S), None);
        assert_eq!(e.rank(5 * S), 4);
        assert_eq!(e.rank(50 * S), 3);
        assert_eq!(e.rank(110 * S), 0);
    }

    #[test]
    fn an_error_keeps_the_verdict_and_starts_a_backoff() {
        let (c, s) = cache(64);
        assert_eq!(
            c.put_verdict(&s, 9, Verdict::Verified, 0, S, 100 * S),
            Ok(())
        );
        let e = c.put_error(&s, 9, 2 * S, 12 * S).expect("entry");
        assert_eq!(e.usable_on_error(2 * S), Some(Verdict::Verified));
        assert!(e.backing_off(11 * S));
        assert!(!e.backing_off(12 * S));
        assert_eq!(c.claim(&s, 9, 3 * S), Some(e));
        // A claim never verified: the backoff alone.
        let e = c.put_error(&s, 10, 2 * S, 12 * S).expect("entry");
        assert_eq!(e.verdict, None);
        assert_eq!(e.rank(3 * S), 1);
        assert_eq!(e.rank(12 * S), 0);
    }

    #[test]
    fn failed_and_spoofed_claims_cannot_push_out_a_verified_crawler() {
        // One slot: every claim competes for it.
        let (c, s) = cache(1);
        assert_eq!(
            c.put_verdict(&s, 1, Verdict::Verified, 0, S, 100 * S),
            Ok(())
        );
        // Long after its freshness, while it is still usable on error.
        let now = 50 * S;
        assert_eq!(
            c.put_error(&s, 2, now, now + 10 * S).map(|e| e.verdict),
            Some(None)
        );
        assert_eq!(
            c.put_verdict(&s, 3, Verdict::Spoofed, now, now + 3600 * S, 0),
            Err(StoreFault::Collision)
        );
        assert_eq!(
            c.claim(&s, 1, now).and_then(|e| e.usable_on_error(now)),
            Some(Verdict::Verified)
        );
        // A fresh verified verdict outranks a stale one.
        assert_eq!(
            c.put_verdict(&s, 4, Verdict::Verified, now, now + S, 0),
            Ok(())
        );
        assert_eq!(c.claim(&s, 1, now), None);
    }

    #[test]
    fn prefix_counts_grow_and_expire() {
        let (c, s) = cache(64);
        assert_eq!(c.spoofed_in_prefix(&s, 77, 0), 0);
        assert_eq!(c.count_spoofed(&s, 77, 0, 10 * S), Ok(1));
        assert_eq!(c.count_spoofed(&s, 77, S, 5 * S), Ok(2));
        assert_eq!(c.spoofed_in_prefix(&s, 77, 9 * S), 2);
        assert_eq!(c.spoofed_in_prefix(&s, 77, 10 * S), 0);
        // Counting restarts after expiry.
        assert_eq!(c.count_spoofed(&s, 77, 11 * S, 20 * S), Ok(1));
    }

    #[test]
    fn a_failing_store_reads_as_a_miss() {
        let (c, s) = cache(8);
        assert_eq!(c.put_verdict(&s, 5, Verdict::Verified, 0, S, S), Ok(()));
        s.fault.set(Fault::Error);
        assert_eq!(c.claim(&s, 5, 0), None);
        assert_eq!(c.spoofed_in_prefix(&s, 5, 0), 0);
        s.fault.set(Fault::Truncate);
        assert_eq!(c.claim(&s, 5, 0), None);
    }

    #[test]
    fn entries_roundtrip() {
        let e = ClaimEntry {
            verdict: Some(Verdict::Unknown),
            fresh_until_ns: 1,
            stale_until_ns: 2,
            backoff_until_ns: 3,
        };
        let mut b = [0u8; ClaimEntry::LEN];
        e.encode(&mut b);
        assert_eq!(ClaimEntry::decode(&b), Some(e));
        b[0] = 9;
        assert_eq!(ClaimEntry::decode(&b), None);
        let p = PrefixEntry {
            spoofed: 4,
            until_ns: 8,
        };
        let mut b = [0u8; PrefixEntry::LEN];
        p.encode(&mut b);
        assert_eq!(PrefixEntry::decode(&b), Some(p));
    }
}
