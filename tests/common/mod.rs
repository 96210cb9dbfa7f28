//! Helpers the host tests share (each test file is its own crate and uses what it needs).
#![allow(dead_code)]

use proptest::test_runner::Config as PtConfig;

/// The fake clock's start, ns since the Unix epoch (2023-11-14T22:13:20Z).
pub const T0: u64 = 1_700_000_000_000_000_000;

/// Proptest settings for these suites: `1 / divisor` of the default cases (at least one),
/// and no failure-persistence files written into the tree.
pub fn pt_config(divisor: u32) -> PtConfig {
    let base = PtConfig::default();
    PtConfig {
        cases: (base.cases / divisor.max(1)).max(1),
        failure_persistence: None,
        ..base
    }
}

/// The class a User-Agent ends up with once verification succeeds (what the catalog claims),
/// so the real-data tables show `search_crawler` for Googlebot instead of `unverified_bot`.
pub fn claimed(
    c: &crawlguard_core::identity::classify::Classification<'_>,
) -> crawlguard_core::identity::class::Class {
    c.bot.map_or(c.class, |b| b.class)
}
