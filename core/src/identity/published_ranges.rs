//! Published ranges in the filter: the sidecar's current IP-range sets
//! (`GET /v1/ranges`, `crawlguard_contract::ranges`), so that a claim of a bot the sidecar
//! verifies by ranges is decided here, with no callout, also while the sidecar is down.
//!
//! - Fetch: each worker's root tick asks on its first tick and every
//!   `verifier.ranges_refresh_s` (`?since=<generation>`: a `304` when nothing changed; a
//!   worker fetches for itself: one small callout per worker and refresh, kept over a
//!   shared-data protocol for the module's size). A `200` whose document parses (at most
//!   `MAX_BODY_BYTES`, `MAX_PREFIXES`) is put in use and stored in [`DATA_KEY`]; anything
//!   else (no answer, another status, an oversize or malformed document) is counted
//!   (`crawlguard.verify.ranges_error`) and logged, and the ranges in use stay.
//! - Install: a worker without a table (a new one, after a configuration reload) first
//!   parses [`DATA_KEY`] into its own table (VM memory: sorted intervals, 32 bytes per
//!   prefix), so a reload during a sidecar outage keeps the ranges.
//! - Decide ([`Ranges::verdict`]): inside the bot's sets `verified`; outside, `spoofed` for a
//!   bot without FCrDNS, otherwise the claim goes to the sidecar as before.
//!
//! The ranges in use never expire: like the sidecar's own range sources, the last good
//! document stays in use however long the sidecar is unreachable (vendors change their
//! ranges over weeks; dropping them would send every claim back to a dead sidecar).

use crate::config::Config;
use crate::host::{Callout, Host};
use crate::identity::verifier_answer::Verdict;
use crate::metrics::{Metrics, VerifyEvent};
use crawlguard_contract::ranges::{self as wire, Ranges};
use std::cell::RefCell;
use std::net::IpAddr;

/// Shared-data key of the last good document (the sidecar's bytes, at most
/// `MAX_BODY_BYTES`): what a worker starts with, so a configuration reload during a sidecar
/// outage keeps the ranges.
pub const DATA_KEY: &str = "cg:ranges";

const NS_PER_S: u64 = 1_000_000_000;

/// What the ranges fetch reads and changes of its worker.
#[derive(Clone, Copy)]
pub struct RangesParts<'a> {
    /// The configuration (`verifier` section).
    pub cfg: &'a Config,
    /// The verification counters.
    pub metrics: &'a Metrics,
    /// This worker's table and fetch.
    pub ranges: &'a RefCell<RangesState>,
}

/// One worker's view: the table in use and the fetch in flight.
#[derive(Debug, Default)]
pub struct RangesState {
    /// The table in use (empty, generation `""`, until a document was had).
    table: Ranges,
    /// The callout of this worker's fetch, while it runs.
    in_flight: Option<u32>,
    /// When this worker last asked, ns (0: never).
    asked_ns: u64,
}

impl RangesState {
    /// What the table decides for `ip` claiming `bot` (see [`Ranges::verdict`]).
    pub fn verdict(&self, ip: IpAddr, bot: &str) -> Option<Verdict> {
        self.table.verdict(ip, bot)
    }

    /// True when callout `token` is this worker's fetch.
    pub fn is_in_flight(&self, token: u32) -> bool {
        self.in_flight == Some(token)
    }

    /// The table in use.
    pub fn table(&self) -> &Ranges {
        &self.table
    }
}

fn refused(w: RangesParts<'_>, host: &mut dyn Host, why: &str) {
    w.metrics.count_verify(host, VerifyEvent::RangesError);
    log::warn!("published ranges: {why}; the ranges in use stay");
}

/// Root tick: a worker without a table takes the stored one; every
/// `verifier.ranges_refresh_s` it asks the sidecar. Nothing with `ranges_refresh_s` 0 or
/// the verifier off.
pub fn tick(w: RangesParts<'_>, host: &mut dyn Host, now_ns: u64) {
    let v = &w.cfg.verifier;
    if !v.enabled || v.ranges_refresh_s == 0 {
        return;
    }
    let Ok(mut st) = w.ranges.try_borrow_mut() else {
        return;
    };
    if st.in_flight.is_some()
        || (st.asked_ns > 0
            && now_ns
                < st.asked_ns
                    .saturating_add(u64::from(v.ranges_refresh_s) * NS_PER_S))
    {
        return;
    }
    st.asked_ns = now_ns;
    if st.table.generation.is_empty() {
        let doc = host.shared_data().get(DATA_KEY).ok().flatten();
        if let Some(r) = doc.and_then(|(d, _)| wire::parse(&d).ok()) {
            install(&mut st, r);
        }
    }
    let since = Some(st.table.generation.as_str()).filter(|g| !g.is_empty());
    let path = wire::request_path(since);
    let dispatched = host.dispatch_callout(&Callout {
        method: "GET",
        cluster: &v.cluster,
        authority: &v.authority,
        path: &path,
        timeout_ms: u64::from(v.timeout_ms),
        body: &[],
    });
    match dispatched {
        Ok(token) => st.in_flight = Some(token),
        Err(_) => {
            drop(st);
            refused(w, host, "fetch not dispatched");
        }
    }
}

fn install(st: &mut RangesState, r: Ranges) {
    log::info!("published ranges {} in use", r.generation);
    st.table = r;
}

/// Root: the answer to this worker's fetch (`status` `None`: no response; `body` at most
/// `MAX_BODY_BYTES + 1` bytes, so that an oversize one is seen as such). A good document
/// is put in use here and stored for the other workers.
pub fn on_response(w: RangesParts<'_>, host: &mut dyn Host, status: Option<&[u8]>, body: &[u8]) {
    let Ok(mut st) = w.ranges.try_borrow_mut() else {
        return;
    };
    st.in_flight = None;
    let parsed = match status {
        Some(b"304") => {
            drop(st);
            return w.metrics.count_verify(host, VerifyEvent::RangesNotModified);
        }
        Some(b"200") => wire::parse(body),
        Some(_) => Err("status other than 200 or 304"),
        None => Err("no answer"),
    };
    match parsed {
        Ok(r) => {
            install(&mut st, r);
            drop(st);
            let _ = host.shared_data().set(DATA_KEY, body, 0);
            w.metrics.count_verify(host, VerifyEvent::RangesUpdated);
        }
        Err(why) => {
            drop(st);
            refused(w, host, why);
        }
    }
}
