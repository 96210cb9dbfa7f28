//! The order in which the sidecar decides a claim, before any DNS: one function that the
//! sidecar's verifier and the command's offline replay (`crawlguard replay --ranges`) both
//! follow, so an offline verdict is the sidecar's minus DNS.

use crate::config::BotMethods;

/// What decides a claim `(ip, bot)` once the bot's methods and ranges are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstStep {
    /// The ip is in the bot's published ranges: `verified` (method `ip_range`).
    Verified,
    /// Not in its ranges, and the bot has FCrDNS domains: forward-confirmed reverse DNS
    /// decides.
    Fcrdns,
    /// No domains, and at least one of its range sets loaded without the ip: `spoofed`
    /// (method `ip_range`).
    Spoofed,
    /// Range-only, and none of its sets loaded yet: `unknown`, so the filter's
    /// stale-if-error keeps an earlier verdict.
    RangesNotLoaded,
    /// A bot without methods: `unknown`.
    Unknown,
}

/// The first step for a claim: ranges first (no I/O), then FCrDNS if the bot has domains,
/// else the ranges' answer if any set loaded. `in_ranges`: the ip is in one of the bot's
/// loaded sets; `any_loaded` is asked only when needed.
pub fn first_step(
    methods: &BotMethods,
    in_ranges: bool,
    any_loaded: impl FnOnce() -> bool,
) -> FirstStep {
    if !methods.ranges.is_empty() && in_ranges {
        FirstStep::Verified
    } else if !methods.domains.is_empty() {
        FirstStep::Fcrdns
    } else if !methods.ranges.is_empty() {
        if any_loaded() {
            FirstStep::Spoofed
        } else {
            FirstStep::RangesNotLoaded
        }
    } else {
        FirstStep::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ranges::RangeSource;

    fn methods(domains: bool, ranges: bool) -> BotMethods {
        BotMethods {
            domains: if domains {
                vec!["googlebot.com".into()]
            } else {
                vec![]
            },
            ranges: if ranges {
                vec![RangeSource::File("r.json".into())]
            } else {
                vec![]
            },
        }
    }

    #[test]
    fn ranges_then_fcrdns_then_loaded_ranges_then_unknown() {
        use FirstStep::*;
        assert_eq!(first_step(&methods(true, true), true, || true), Verified);
        assert_eq!(first_step(&methods(true, true), false, || true), Fcrdns);
        assert_eq!(first_step(&methods(true, false), false, || true), Fcrdns);
        assert_eq!(first_step(&methods(false, true), false, || true), Spoofed);
        assert_eq!(
            first_step(&methods(false, true), false, || false),
            RangesNotLoaded
        );
        assert_eq!(first_step(&methods(false, false), true, || true), Unknown);
    }
}
