//! Published IP ranges (`{"creationTime": .., "prefixes": [{"ipv4Prefix": ..} | {"ipv6Prefix": ..}]}`),
//! their sources (local files and URLs) and the ranges currently in use per source.
//!
//! Google, OpenAI, Bing, Perplexity and others publish their crawler ranges in this format.
//! Parsing is lenient about what does not matter (extra fields, whitespace, formatting,
//! a UTF-8 BOM, host bits set in a prefix, a bare address without `/len`) and strict about
//! what does: a document that is not JSON, has no `prefixes` array, holds a prefix that does
//! not parse, or holds no prefix at all is rejected as a whole. A half-written or truncated
//! file, or a download that went wrong, must never silently shrink a bot's ranges; the
//! previously loaded ranges stay instead.
//!
//! [`RangeStore`] keeps the ranges of every [`RangeSource`]: files are re-read here when they
//! change ([`RangeStore::refresh_files`]); URLs are fetched by [`crate::fetch`], which installs
//! what it gets ([`RangeStore::install`]). Each source remembers when its data was last
//! confirmed current, for the age and staleness metrics ([`RangeStore::status`]).
//!
//! By job: `document` (the format: parsing and [`RangeError`]), `source` ([`RangeSource`]),
//! `store` ([`RangeStore`] and its status), `file_refresh` (re-reading changed files).

mod document;
mod file_refresh;
mod source;
mod store;

use std::net::IpAddr;

use ipnet::{Ipv4Net, Ipv6Net};

pub use document::{load_range_file, parse_range_file, RangeError};
pub use file_refresh::RefreshOutcome;
pub use source::RangeSource;
pub use store::{RangeStore, SourceStatus, StalenessChange};

/// A set of IPv4 and IPv6 prefixes, as loaded from one or more range files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// IPv4 prefixes, host bits cleared, in file order.
    pub v4: Vec<Ipv4Net>,
    /// IPv6 prefixes, host bits cleared, in file order.
    pub v6: Vec<Ipv6Net>,
}

impl RangeSet {
    /// True when `ip` lies inside one of the prefixes. An IPv4-mapped IPv6 address
    /// (`::ffff:a.b.c.d`) is checked as the IPv4 address it carries.
    pub fn contains(&self, ip: IpAddr) -> bool {
        // Linear scans: the largest real file (Google's user-triggered fetchers) has ~1,000
        // prefixes, a few microseconds per check, and the result is cached per (ip, bot).
        match ip.to_canonical() {
            IpAddr::V4(v4) => self.v4.iter().any(|n| n.contains(&v4)),
            IpAddr::V6(v6) => self.v6.iter().any(|n| n.contains(&v6)),
        }
    }

    /// Number of prefixes of both families.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// True when the set holds no prefix.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
