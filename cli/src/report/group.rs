//! Counters of one class, route or bot id, and who produced a rejection.

use super::document::{GroupJson, OriginJson, ShareJson, StatusJson, TtfbJson};
use crate::logfmt::{is_upstream_answer, LogRecord, UpstreamReach};
use crate::stats::MsHist;
use crate::status::StatusBucket;
use crate::table::share;
use crawlguard_core::response::rejection::{DETAILS_LIMITED, DETAILS_SHED};

/// Who produced a rejection (429/503).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// crawlguard's rate limit answered (`crawlguard_rate_limited`, its `reject_status`
    /// 429 or 503), or, in formats without response details, the proxy answered without
    /// reaching the upstream and without an Envoy response flag.
    Crawlguard,
    /// crawlguard shed the request because the origin was unhealthy (`crawlguard_shed`,
    /// always 503): crawlguard's own, but the site's load, not the client's rate.
    Shed,
    /// The upstream answered (`via_upstream`, `crawlguard_normalised_upstream`, or the
    /// upstream was reached).
    Upstream,
    /// Another Envoy filter or Envoy itself (other response details, or a response flag such
    /// as `RL`, `UH`, `UF`).
    OtherEnvoy,
    /// The log does not tell (e.g. plain Apache combined).
    Unknown,
}

impl Origin {
    /// Snake-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Crawlguard => "crawlguard",
            Origin::Shed => "crawlguard_shed",
            Origin::Upstream => "upstream",
            Origin::OtherEnvoy => "other_envoy",
            Origin::Unknown => "unknown",
        }
    }

    /// Who answered `r`.
    pub fn of(r: &LogRecord<'_>) -> Origin {
        match r.details {
            Some(d) if d == DETAILS_LIMITED.as_bytes() => return Origin::Crawlguard,
            Some(d) if d == DETAILS_SHED.as_bytes() => return Origin::Shed,
            Some(d) if is_upstream_answer(d) => return Origin::Upstream,
            Some(_) => return Origin::OtherEnvoy,
            None => {}
        }
        match r.upstream {
            UpstreamReach::Reached => Origin::Upstream,
            UpstreamReach::NotReached if r.flags.is_some() => Origin::OtherEnvoy,
            UpstreamReach::NotReached => Origin::Crawlguard,
            UpstreamReach::Unknown => Origin::Unknown,
        }
    }
}

/// Counters of one class or bot id.
#[derive(Debug, Clone, Default)]
pub struct Group {
    /// Requests.
    pub requests: u64,
    /// By [`StatusBucket`], in its declaration order.
    pub status: [u64; StatusBucket::COUNT],
    /// Rejections (429 and 503) by [`Origin`], in its declaration order.
    pub origin: [u64; 5],
    /// Upstream times (TTFB), ms; lines without one are not counted.
    pub ttfb: MsHist,
}

impl Group {
    pub(super) fn add(&mut self, r: &LogRecord<'_>) {
        self.requests += 1;
        if let Some(c) = self.status.get_mut(StatusBucket::of(r.status).index()) {
            *c += 1;
        }
        if matches!(r.status, 429 | 503) {
            let o = Origin::of(r) as usize;
            if let Some(c) = self.origin.get_mut(o) {
                *c += 1;
            }
        }
        if let Some(ms) = r.upstream_ms {
            self.ttfb.add(ms);
        }
    }

    pub(super) fn json(&self) -> GroupJson {
        let s = |b: StatusBucket| self.status.get(b.index()).copied().unwrap_or(0);
        let o = |i: usize| self.origin.get(i).copied().unwrap_or(0);
        let share = |n: u64| share(n, self.requests);
        GroupJson {
            requests: self.requests,
            status: StatusJson {
                s2xx: s(StatusBucket::S2xx),
                s3xx: s(StatusBucket::S3xx),
                s4xx: s(StatusBucket::S4xx),
                s429: s(StatusBucket::S429),
                s503: s(StatusBucket::S503),
                s5xx: s(StatusBucket::S5xx),
                other: s(StatusBucket::Other),
            },
            share: ShareJson {
                s2xx: share(s(StatusBucket::S2xx)),
                s429: share(s(StatusBucket::S429)),
                s503: share(s(StatusBucket::S503)),
                s5xx: share(s(StatusBucket::S5xx) + s(StatusBucket::S503)),
            },
            rejections_by_origin: OriginJson {
                crawlguard: o(Origin::Crawlguard as usize),
                crawlguard_shed: o(Origin::Shed as usize),
                upstream: o(Origin::Upstream as usize),
                other_envoy: o(Origin::OtherEnvoy as usize),
                unknown: o(Origin::Unknown as usize),
            },
            ttfb_ms: TtfbJson {
                n: self.ttfb.len(),
                p50: self.ttfb.percentile(50.0),
                p95: self.ttfb.percentile(95.0),
                p99: self.ttfb.percentile(99.0),
            },
        }
    }
}
