//! `crawlguard report`: per class and per bot id, what the access log says happened.
//!
//! Streaming: each record updates fixed-size counters. What grows, each bounded: the
//! percentile counters (one per distinct millisecond value, see [`crate::stats::MsHist`]), the minute rows
//! for the peak minutes ([`Minutes`]), the plot's bins ([`Timeline`]), the top-talker table
//! ([`Heavy`], client names cut to [`CLIENT_NAME_BYTES`]), the User-Agent cache, and the
//! limit names ([`LIMITS_KEPT`]); lines are read up to [`crate::input::MAX_LINE_BYTES`].

pub mod baseline;
mod client;
mod document;
pub mod gate;
mod group;
mod render;

pub use client::{Client, Talker};
pub use document::{
    BotJson, ClassJson, ClassSourceJson, GroupJson, MinuteJson, OriginJson, ReportJson, RouteJson,
    ShareJson, StatusJson, TalkerJson, TalkersJson, TtfbJson,
};
pub use group::{Group, Origin};
pub use render::render;

use crate::input::FileStats;
use crate::logfmt::LogRecord;
use crate::minutes::Minutes;
use crate::stats::Heavy;
use crate::timeline::{Kind, Timeline};
use crawlguard_core::config::Config;
use crawlguard_core::identity::classify::Class;
use crawlguard_core::request::path_only;
use std::collections::{BTreeMap, HashMap};

/// Schema name and version of `--json` output.
pub const SCHEMA: &str = "crawlguard.report/v1";

/// Keys tracked by the top-talker table (see [`Heavy`]).
pub const TALKER_CAPACITY: usize = 10_000;

/// User-Agents whose classification is remembered (access logs repeat the same few
/// thousand agents; the cache is cleared when full).
const UA_CACHE: usize = 8192;
/// Longest User-Agent remembered, bytes (longer ones are classified each time): bounds the
/// cache at [`UA_CACHE`] x 1 KiB.
const UA_CACHE_KEY_BYTES: usize = 1024;
/// Longest client name (a logged host name, not an IP) kept, bytes: a DNS name is at most
/// 253; longer ones are cut, so the top-talker table stays within its keys x 255 bytes.
pub const CLIENT_NAME_BYTES: usize = 255;
/// Distinct limit names kept (by logged `RateLimit-Policy`), each cut to
/// [`CLIENT_NAME_BYTES`]; further ones are counted under `(other)`.
pub const LIMITS_KEPT: usize = 256;

/// The report being built.
pub struct Report {
    cfg: Config,
    /// User-Agent -> (class, index of the bot entry): the classifier's answer, remembered.
    ua_cache: HashMap<Box<[u8]>, (Class, Option<usize>)>,
    /// Per crawlguard route of the configuration (`routes.len()` = `default`), from the
    /// path.
    pub routes: Vec<Group>,
    /// Per class, [`Class::index`] order.
    pub classes: [Group; Class::COUNT],
    /// Per bot id (known bots only).
    pub bots: HashMap<String, Group>,
    /// Per minute of log time (minutes since the epoch), bounded.
    pub minutes: Minutes,
    /// Bins of log time for the plot.
    pub timeline: Timeline,
    /// Top talkers by client address.
    pub talkers: Heavy<Client, Talker>,
    /// Records whose class was logged.
    pub class_logged: u64,
    /// Records classified here from the User-Agent.
    pub class_derived: u64,
    /// Earliest and latest record time, ms.
    pub span: Option<(i64, i64)>,
    /// Records with a limit name logged, by limit.
    pub limits: BTreeMap<String, u64>,
    /// Inputs, once read.
    pub inputs: Vec<FileStats>,
}

impl Report {
    /// An empty report classifying User-Agents with `cfg`'s catalog and mapping paths to
    /// `cfg`'s routes.
    pub fn new(cfg: Config) -> Report {
        Report {
            routes: vec![Group::default(); cfg.routes.len() + 1],
            cfg,
            ua_cache: HashMap::new(),
            classes: Default::default(),
            bots: HashMap::new(),
            minutes: Minutes::default(),
            timeline: Timeline::default(),
            talkers: Heavy::new(TALKER_CAPACITY),
            class_logged: 0,
            class_derived: 0,
            span: None,
            limits: BTreeMap::new(),
            inputs: Vec::new(),
        }
    }

    /// The filter's classification of `ua`: (class, bot entry index).
    fn classify(&mut self, ua: Option<&[u8]>) -> (Class, Option<usize>) {
        let key = ua.unwrap_or_default();
        if let Some(hit) = self.ua_cache.get(key) {
            return *hit;
        }
        let c = self.cfg.classifier.classify(ua);
        let entries = self.cfg.classifier.entries();
        let bot = c
            .bot
            .and_then(|b| entries.iter().position(|e| std::ptr::eq(e, b)));
        let v = (c.class, bot);
        if key.len() > UA_CACHE_KEY_BYTES {
            return v;
        }
        if self.ua_cache.len() >= UA_CACHE {
            self.ua_cache.clear();
        }
        // A missing User-Agent and an empty one classify alike (script, no bot).
        self.ua_cache.insert(key.into(), v);
        v
    }

    /// Counts one record.
    pub fn add(&mut self, r: &LogRecord<'_>) {
        let (derived, bot) = self.classify(r.ua);
        let class = match r.class {
            Some(k) => {
                self.class_logged += 1;
                k
            }
            None => {
                self.class_derived += 1;
                derived
            }
        };
        if let Some(g) = self.classes.get_mut(class.index()) {
            g.add(r);
        }
        if let Some(g) = self.routes.get_mut(self.cfg.route_of(path_only(r.path))) {
            g.add(r);
        }
        if let Some(bot) = bot.and_then(|i| self.cfg.classifier.entries().get(i)) {
            match self.bots.get_mut(bot.id.as_str()) {
                Some(g) => g.add(r),
                None => {
                    let mut g = Group::default();
                    g.add(r);
                    self.bots.insert(bot.id.clone(), g);
                }
            }
        }
        self.timeline.add(r.ts_ms, class, Kind::of(r));
        let rejected = matches!(r.status, 429 | 503);
        let m = self.minutes.entry(r.ts_ms.div_euclid(60_000));
        let i = class.index();
        if let Some(v) = m.requests.get_mut(i) {
            *v += 1;
        }
        if rejected {
            if let Some(v) = m.rejected.get_mut(i) {
                *v += 1;
            }
        }
        if r.status == 429 {
            if let Some(v) = m.s429.get_mut(i) {
                *v += 1;
            }
        }
        self.talkers.add(&Client::from_log(r.client), |t| {
            t.class = Some(class);
            if rejected {
                t.rejected += 1;
            }
        });
        if let Some(l) = r.limit {
            let mut name = String::from_utf8_lossy(l.get(..CLIENT_NAME_BYTES).unwrap_or(l));
            if self.limits.len() >= LIMITS_KEPT && !self.limits.contains_key(name.as_ref()) {
                name = "(other)".into();
            }
            *self.limits.entry(name.into_owned()).or_insert(0) += 1;
        }
        self.span = Some(match self.span {
            None => (r.ts_ms, r.ts_ms),
            Some((a, b)) => (a.min(r.ts_ms), b.max(r.ts_ms)),
        });
    }
}
