//! The time each route spends shed, counted once per Envoy however many workers judge it
//! (`crawlguard.shed.<route>.duration_ms.<level>`, [`crate::metrics::PerKey::shed_ms`]).
//!
//! Every worker judges every route about once a second; if each added the second it just
//! judged, the counter would grow by the number of workers per second. Instead the route's
//! clock (`cg:shedclock:<route>`, ms since the Unix epoch) lives in shared data: a worker
//! advances it to now with a compare-and-swap and counts only the interval it advanced it by,
//! so the intervals the workers count add up to the wall time, each millisecond once.

use crate::store::{read_modify_write, Rewrite, SharedData, StoreError};

/// Shared-data key prefix of a route's shed clock (`cg:shedclock:<route>`).
pub const CLOCK_PREFIX: &str = "cg:shedclock:";

/// The longest interval one advance counts, ms: after a longer gap (no worker ticked, e.g.
/// the VMs were paused) the clock restarts rather than counting time nobody judged.
pub const MAX_ADVANCE_MS: u64 = 10_000;

/// The key of `route`'s clock.
pub fn key(route: &str) -> String {
    format!("{CLOCK_PREFIX}{route}")
}

/// Advances the route's clock to `now_ms` and returns the interval this call advanced it by,
/// ms (0: the first call, a clock already at or past `now_ms`, or a gap over
/// [`MAX_ADVANCE_MS`]). Errors: the store's, after `cas_retries` lost races.
pub fn advance(
    store: &dyn SharedData,
    key: &str,
    now_ms: u64,
    cas_retries: u32,
) -> Result<u64, StoreError> {
    read_modify_write(store, key, cas_retries, &mut |bytes| {
        let was = bytes
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes);
        match was {
            Some(t) if t >= now_ms => Rewrite::Keep(0),
            Some(t) if now_ms - t <= MAX_ADVANCE_MS => {
                Rewrite::Write(now_ms.to_le_bytes().to_vec(), now_ms - t)
            }
            _ => Rewrite::Write(now_ms.to_le_bytes().to_vec(), 0),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::mem::MemStore;

    #[test]
    fn workers_advancing_one_clock_count_each_millisecond_once() {
        let store = MemStore::default();
        let k = key("api");
        assert_eq!(k, "cg:shedclock:api");
        // The first advance starts the clock.
        assert_eq!(advance(&store, &k, 1_000, 3), Ok(0));
        // Two workers judge the same second: the first counts it, the second nothing.
        assert_eq!(advance(&store, &k, 2_000, 3), Ok(1_000));
        assert_eq!(advance(&store, &k, 2_000, 3), Ok(0));
        assert_eq!(advance(&store, &k, 2_010, 3), Ok(10));
        // A late worker whose now is behind the clock counts nothing and moves nothing back.
        assert_eq!(advance(&store, &k, 1_500, 3), Ok(0));
        assert_eq!(advance(&store, &k, 3_010, 3), Ok(1_000));
        // A gap no worker judged restarts the clock.
        assert_eq!(advance(&store, &k, 3_010 + MAX_ADVANCE_MS + 1, 3), Ok(0));
        assert_eq!(advance(&store, &k, 3_011 + MAX_ADVANCE_MS + 1, 3), Ok(1));
    }
}
