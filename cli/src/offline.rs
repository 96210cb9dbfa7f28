//! Offline verification for `replay --ranges`: answers the filter's verifier callouts the way
//! the sidecar would, from the sidecar's own configuration and range files, without DNS.
//!
//! The sidecar decides a claim (ip, bot) by: the bot's published ranges contain the ip ->
//! `verified`; else, if the bot has FCrDNS domains, forward-confirmed reverse DNS decides;
//! else, if the bot has range files, `spoofed`; else `unknown`. Replay never does DNS, so a
//! claim that only FCrDNS could decide is answered `unknown` (the filter classes it
//! `unverified_bot`) and counted as such in the output.

use crawlguard_sidecar::config::{BotMethods, Config};
use crawlguard_sidecar::ranges::{load_range_file, RangeSet, RangeSource};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// What the offline verifier answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// The ip is in the bot's published ranges.
    Verified,
    /// The bot has ranges (and no FCrDNS), the ip is not in them.
    Spoofed,
    /// Only FCrDNS could decide; not done offline.
    UnknownNeedsDns,
    /// No method for this bot.
    Unknown,
    /// No `--ranges`: nothing is checked.
    NotChecked,
}

impl Verdict {
    /// The verdict word of the verifier contract.
    pub fn contract(self) -> &'static str {
        match self {
            Verdict::Verified => "verified",
            Verdict::Spoofed => "spoofed",
            Verdict::UnknownNeedsDns | Verdict::Unknown | Verdict::NotChecked => "unknown",
        }
    }

    /// A label for output.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Verified => "verified (ip range)",
            Verdict::Spoofed => "spoofed (not in ranges)",
            Verdict::UnknownNeedsDns => "unknown (needs FCrDNS, not done offline)",
            Verdict::Unknown => "unknown (no method)",
            Verdict::NotChecked => "unknown (no --ranges)",
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
            catalog
                .entry(bot)
                .or_default()
                .ranges
                .push(RangeSource::File(file));
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
    pub fn verdict(&self, ip: IpAddr, bot: &str) -> Verdict {
        let Some(m) = self.catalog.get(bot) else {
            return Verdict::Unknown;
        };
        let in_ranges = m
            .ranges
            .iter()
            .any(|p| self.sets.get(p).is_some_and(|s| s.contains(ip)));
        if in_ranges {
            Verdict::Verified
        } else if !m.domains.is_empty() {
            Verdict::UnknownNeedsDns
        } else if !m.ranges.is_empty() {
            Verdict::Spoofed
        } else {
            Verdict::Unknown
        }
    }

    /// The TTL the sidecar would give `v`, s.
    pub fn ttl(&self, v: Verdict) -> u64 {
        match v {
            Verdict::Verified => self.ttl_s.0,
            Verdict::Spoofed => self.ttl_s.1,
            Verdict::UnknownNeedsDns | Verdict::Unknown | Verdict::NotChecked => self.ttl_s.2,
        }
    }
}
