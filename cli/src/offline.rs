//! Offline verification for `replay --ranges`: answers the filter's verifier callouts the way
//! the sidecar would, from the sidecar's own configuration and range files, without DNS.
//!
//! The sidecar decides a claim (ip, bot) in the order of
//! `crawlguard_sidecar::verify::decision_order::first_step`, which this follows: the bot's
//! published ranges contain the ip -> `verified`; else, if the bot has FCrDNS domains,
//! forward-confirmed reverse DNS decides; else, if one of its range sets loaded, `spoofed`;
//! else `unknown`. Replay never does DNS, so a claim that only FCrDNS could decide is
//! answered `unknown` (the filter classes it `unverified_bot`) and counted as such in the
//! output; nor does it fetch, so a bot whose ranges are only URLs is `unknown`, as from a
//! sidecar that has not fetched them yet.

use crawlguard_contract::verify::{self, Answer, Method, Verdict};
use crawlguard_sidecar::config::{BotMethods, Config};
use crawlguard_sidecar::ranges::{load_range_file, RangeSet, RangeSource};
use crawlguard_sidecar::verify::decision_order::{first_step, FirstStep};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// What the offline verifier answers, with why: a contract [`Verdict`] and how it was
/// (or could not be) reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OfflineVerdict {
    /// The ip is in the bot's published ranges.
    Verified,
    /// The bot has ranges (and no FCrDNS), the ip is not in them.
    Spoofed,
    /// Only FCrDNS could decide; not done offline.
    UnknownNeedsDns,
    /// The bot's ranges are only URLs, never fetched offline.
    UnknownRangesNotFetched,
    /// No method for this bot.
    Unknown,
    /// No `--ranges`: nothing is checked.
    NotChecked,
}

impl OfflineVerdict {
    /// The verdict of the verifier contract.
    pub fn contract(self) -> Verdict {
        match self {
            OfflineVerdict::Verified => Verdict::Verified,
            OfflineVerdict::Spoofed => Verdict::Spoofed,
            OfflineVerdict::UnknownNeedsDns
            | OfflineVerdict::UnknownRangesNotFetched
            | OfflineVerdict::Unknown
            | OfflineVerdict::NotChecked => Verdict::Unknown,
        }
    }

    /// The method of the verifier contract that decided: the ranges, or none.
    pub fn method(self) -> Method {
        match self {
            OfflineVerdict::Verified | OfflineVerdict::Spoofed => Method::IpRange,
            _ => Method::None,
        }
    }

    /// A label for output.
    pub fn label(self) -> &'static str {
        match self {
            OfflineVerdict::Verified => "verified (ip range)",
            OfflineVerdict::Spoofed => "spoofed (not in ranges)",
            OfflineVerdict::UnknownNeedsDns => "unknown (needs FCrDNS, not done offline)",
            OfflineVerdict::UnknownRangesNotFetched => {
                "unknown (ranges only from URLs, not fetched offline)"
            }
            OfflineVerdict::Unknown => "unknown (no method)",
            OfflineVerdict::NotChecked => "unknown (no --ranges)",
        }
    }
}

/// The sidecar's catalog and ranges, loaded once.
#[derive(Debug, Default)]
pub struct Offline {
    catalog: BTreeMap<String, BotMethods>,
    sets: HashMap<RangeSource, RangeSet>,
    /// Verdict TTLs, s: verified, spoofed, unknown (the sidecar's `[ttl]`).
    pub ttl_s: (u64, u64, u64),
    /// What was loaded, for the output.
    pub description: Vec<String>,
}

impl Offline {
    /// Loads `--ranges` arguments: a sidecar TOML configuration (`*.toml`: its `[[bots]]`
    /// merged with the built-in catalog, relative range paths resolved against the file, as
    /// the sidecar does), and/or `BOT=FILE` pairs adding a range file to a bot. Every range
    /// file must load: a replay must not silently run with fewer ranges than asked for.
    pub fn load(args: &[String]) -> Result<Offline, String> {
        let mut cfg = Config::default();
        let mut pairs: Vec<(String, PathBuf)> = Vec::new();
        let mut description = Vec::new();
        for a in args {
            if let Some((bot, file)) = a.split_once('=') {
                pairs.push((bot.to_string(), PathBuf::from(file)));
            } else {
                cfg = Config::load(Path::new(a)).map_err(|e| format!("--ranges {a}: {e}"))?;
                cfg.validate().map_err(|e| format!("--ranges {a}: {e}"))?;
                description.push(format!("sidecar configuration {a}"));
            }
        }
        let mut catalog = cfg.catalog().map_err(|e| format!("sidecar catalog: {e}"))?;
        for (bot, file) in pairs {
            description.push(format!("{bot}={}", file.display()));
            // A typo must not replay quietly with the bot judged without its ranges.
            let Some(methods) = catalog.get_mut(&bot) else {
                return Err(format!(
                    "--ranges {bot}={}: no bot {bot:?} in the catalog (bot ids are lowercase, \
                     as in `crawlguard classify`; a sidecar configuration's [[bots]] adds one)",
                    file.display()
                ));
            };
            methods.ranges.push(RangeSource::File(file));
        }
        let mut sets = HashMap::new();
        let mut urls = Vec::new();
        for m in catalog.values() {
            for source in &m.ranges {
                match source {
                    RangeSource::File(p) if !sets.contains_key(source) => {
                        let s = load_range_file(p)
                            .map_err(|e| format!("range file {}: {e}", p.display()))?;
                        sets.insert(source.clone(), s);
                    }
                    RangeSource::File(_) => {}
                    // A replay does not fetch: a bot whose ranges come from a URL is judged
                    // without them (as by a sidecar that has not fetched them yet), and
                    // the output says which.
                    RangeSource::Url(u) => urls.push(u.clone()),
                }
            }
        }
        urls.sort();
        urls.dedup();
        if !urls.is_empty() {
            description.push(format!(
                "{} range URLs not fetched offline (their bots are judged without them: give \
                 the files as BOT=FILE): {}",
                urls.len(),
                urls.join(", ")
            ));
        }
        Ok(Offline {
            catalog,
            sets,
            ttl_s: (cfg.ttl.verified_s, cfg.ttl.spoofed_s, cfg.ttl.unknown_s),
            description,
        })
    }

    /// Number of prefixes loaded, over all files.
    pub fn prefixes(&self) -> usize {
        self.sets.values().map(RangeSet::len).sum()
    }

    /// The sidecar's verdict for `ip` claiming `bot`, minus DNS.
    pub fn verdict(&self, ip: IpAddr, bot: &str) -> OfflineVerdict {
        let Some(m) = self.catalog.get(bot) else {
            return OfflineVerdict::Unknown;
        };
        let in_ranges = m
            .ranges
            .iter()
            .any(|p| self.sets.get(p).is_some_and(|s| s.contains(ip)));
        // The sidecar's own order; a set from a URL is never loaded offline.
        let any_loaded = || m.ranges.iter().any(|p| self.sets.contains_key(p));
        match first_step(m, in_ranges, any_loaded) {
            FirstStep::Verified => OfflineVerdict::Verified,
            FirstStep::Fcrdns => OfflineVerdict::UnknownNeedsDns,
            FirstStep::Spoofed => OfflineVerdict::Spoofed,
            // Every set from a file loaded, so these are URLs, which a replay does not fetch.
            FirstStep::RangesNotLoaded => OfflineVerdict::UnknownRangesNotFetched,
            FirstStep::Unknown => OfflineVerdict::Unknown,
        }
    }

    /// The TTL the sidecar would give `v`, s.
    pub fn ttl(&self, v: OfflineVerdict) -> u64 {
        match v {
            OfflineVerdict::Verified => self.ttl_s.0,
            OfflineVerdict::Spoofed => self.ttl_s.1,
            OfflineVerdict::UnknownNeedsDns
            | OfflineVerdict::UnknownRangesNotFetched
            | OfflineVerdict::Unknown
            | OfflineVerdict::NotChecked => self.ttl_s.2,
        }
    }
}

/// TTL of the answers given without `--ranges` (every claim `unknown`), s: the sidecar's
/// default `ttl.unknown_s`.
pub fn not_checked_ttl_s() -> u64 {
    static TTL_S: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TTL_S.get_or_init(|| Config::default().ttl.unknown_s)
}

/// The claim `(ip, bot)` of a verify request target ([`verify::claim_of_request_path`]);
/// `("", "")` when the target is not one (the ip then fails to parse and the claim is
/// answered `unknown`).
pub fn claim_of(path: &str) -> (&str, &str) {
    verify::claim_of_request_path(path).unwrap_or(("", ""))
}

/// Answers the verify callout `path` from `offline` (without it: `unknown`, as when no
/// verifier is reachable) with the contract's [`Answer`] as JSON; returns the answer's
/// body and the claimed bot id with the offline verdict, for counting.
pub fn answer(offline: Option<&Offline>, path: &str) -> (String, String, OfflineVerdict) {
    let (ip, bot) = claim_of(path);
    let v = match (offline, ip.parse::<IpAddr>()) {
        (Some(o), Ok(addr)) => o.verdict(addr, bot),
        (Some(_), Err(_)) => OfflineVerdict::Unknown,
        (None, _) => OfflineVerdict::NotChecked,
    };
    let body = Answer {
        ip: ip.to_string(),
        bot: bot.to_string(),
        verdict: v.contract(),
        method: v.method(),
        host: String::new(),
        ttl_s: offline.map_or_else(not_checked_ttl_s, |o| o.ttl(v)),
    }
    .to_json();
    (body, bot.to_string(), v)
}
