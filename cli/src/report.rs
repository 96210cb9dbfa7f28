//! `crawlguard report`: per class and per bot id, what the access log says happened.
//!
//! Streaming: each record updates fixed-size counters. What grows, each bounded: the
//! percentile counters (one per distinct millisecond value, see [`MsHist`]), the minute rows
//! for the peak minutes ([`Minutes`]), the plot's bins ([`Timeline`]), the top-talker table
//! ([`Heavy`], client names cut to [`CLIENT_NAME_BYTES`]), the User-Agent cache, and the
//! limit names ([`LIMITS_KEPT`]); lines are read up to [`crate::input::MAX_LINE_BYTES`].

use crate::input::FileStats;
use crate::logfmt::{LogRecord, UpstreamReach};
use crate::minutes::{Minute, Minutes};
use crate::stats::{Heavy, MsHist};
use crate::status::StatusBucket;
use crate::table::{pct, TextTable};
use crate::time;
use crate::timeline::{Kind, Timeline};
use crawlguard::classify::Class;
use crawlguard::config::Config;
use crawlguard::request::path_only;
use crawlguard::respond::{DETAILS_LIMITED, DETAILS_NORMALISED, DETAILS_SHED};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// Schema name and version of `--json` output.
pub const SCHEMA: &str = "crawlguard.report/v1";

/// Keys tracked by the top-talker table (see [`Heavy`]).
pub const TALKER_CAPACITY: usize = 10_000;

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
            Some(d) if d == DETAILS_NORMALISED.as_bytes() || d == b"via_upstream" => {
                return Origin::Upstream
            }
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
    fn add(&mut self, r: &LogRecord<'_>) {
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

    fn json(&self) -> GroupJson {
        let s = |b: StatusBucket| self.status.get(b.index()).copied().unwrap_or(0);
        let o = |i: usize| self.origin.get(i).copied().unwrap_or(0);
        let share = |n: u64| ratio(n, self.requests);
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

fn ratio(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 / d as f64
    }
}

/// A client address as logged: an IP when it parses, else the text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// A parsed address.
    Ip(IpAddr),
    /// Anything else (a host name).
    Name(Box<str>),
    /// Not logged.
    Unknown,
}

impl Client {
    /// From the logged bytes.
    pub fn from_log(b: Option<&[u8]>) -> Client {
        let Some(b) = b else {
            return Client::Unknown;
        };
        match std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<IpAddr>().ok())
        {
            Some(ip) => Client::Ip(ip.to_canonical()),
            None => Client::Name(
                String::from_utf8_lossy(b.get(..CLIENT_NAME_BYTES).unwrap_or(b)).into(),
            ),
        }
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Client::Ip(ip) => write!(f, "{ip}"),
            Client::Name(n) => f.write_str(n),
            Client::Unknown => f.write_str("-"),
        }
    }
}

/// Per-client payload of the top-talker table.
#[derive(Debug, Clone, Copy, Default)]
pub struct Talker {
    /// Rejections (429/503) counted while the client was tracked.
    pub rejected: u64,
    /// Class of its latest request.
    pub class: Option<Class>,
}

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
    pub classes: [Group; 8],
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

    /// The report as the `--json` document.
    pub fn json(&self, top: usize) -> ReportJson {
        let lines = self.inputs.iter().map(|f| f.lines).sum();
        let parsed = self.inputs.iter().map(|f| f.parsed).sum();
        let unparsable = self.inputs.iter().map(|f| f.unparsable).sum();
        let classes = Class::ALL
            .iter()
            .filter_map(|c| {
                let g = self.classes.get(c.index())?;
                (g.requests > 0).then(|| ClassJson {
                    class: c.as_str(),
                    group: g.json(),
                })
            })
            .collect();
        let mut bots: Vec<BotJson> = self
            .bots
            .iter()
            .map(|(id, g)| {
                let e = self.cfg.classifier.entries().iter().find(|e| &e.id == id);
                BotJson {
                    bot: id.clone(),
                    catalog_class: e.map_or("", |e| e.class.as_str()),
                    verify: e.is_some_and(|e| e.verify),
                    group: g.json(),
                }
            })
            .collect();
        bots.sort_by(|a, b| {
            b.group
                .requests
                .cmp(&a.group.requests)
                .then_with(|| a.bot.cmp(&b.bot))
        });
        let minute_json = |(k, m): (i64, Minute)| MinuteJson {
            minute: time::fmt_minute(k),
            requests: m.requests.iter().map(|v| u64::from(*v)).sum(),
            s429: m.s429.iter().map(|v| u64::from(*v)).sum(),
            rejected: m.rejected.iter().map(|v| u64::from(*v)).sum(),
            s429_by_class: Class::ALL
                .iter()
                .filter_map(|c| {
                    let v = *m.s429.get(c.index())?;
                    (v > 0).then(|| (c.as_str().to_string(), u64::from(v)))
                })
                .collect(),
        };
        ReportJson {
            schema: SCHEMA,
            inputs: self.inputs.clone(),
            lines,
            parsed,
            unparsable,
            first: self.span.map(|(a, _)| time::fmt_ms(a)),
            last: self.span.map(|(_, b)| time::fmt_ms(b)),
            class_source: ClassSourceJson {
                logged: self.class_logged,
                classifier: self.class_derived,
            },
            classes,
            routes: self
                .routes
                .iter()
                .enumerate()
                .filter(|(_, g)| g.requests > 0)
                .map(|(i, g)| RouteJson {
                    route: self.cfg.route_name(i).to_string(),
                    group: g.json(),
                })
                .collect(),
            bots,
            top_429_minutes: self
                .minutes
                .top(5, Minute::total_429)
                .into_iter()
                .map(minute_json)
                .collect(),
            busiest_minutes: self
                .minutes
                .top(5, Minute::total_requests)
                .into_iter()
                .map(minute_json)
                .collect(),
            minutes_exact: self.minutes.exact(),
            top_talkers: TalkersJson {
                error_bound: self.talkers.error(),
                clients: self
                    .talkers
                    .top(top)
                    .into_iter()
                    .map(|(c, n, t)| TalkerJson {
                        client: c.to_string(),
                        requests: n,
                        rejected: t.rejected,
                        class: t.class.map_or("", Class::as_str),
                    })
                    .collect(),
            },
            limits: self.limits.clone(),
            ttfb: "nearest-rank over the upstream time (x-envoy-upstream-service-time, \
                   $upstream_response_time), exact at the logs' 1 ms resolution; lines without \
                   an upstream time are not counted",
        }
    }
}

/// `--json` document (schema [`SCHEMA`], documented in the README).
#[derive(Debug, Serialize)]
pub struct ReportJson {
    /// `crawlguard.report/v1`.
    pub schema: &'static str,
    /// Per input: format, lines, parsed, unparsable (with example line numbers), error.
    pub inputs: Vec<FileStats>,
    /// Non-blank lines read.
    pub lines: u64,
    /// Lines parsed.
    pub parsed: u64,
    /// Lines that parsed in no format.
    pub unparsable: u64,
    /// Earliest request time (RFC 3339, UTC).
    pub first: Option<String>,
    /// Latest request time.
    pub last: Option<String>,
    /// Where the class came from.
    pub class_source: ClassSourceJson,
    /// Per class with requests.
    pub classes: Vec<ClassJson>,
    /// Per crawlguard route (of `--config`; without it every path is `default`).
    pub routes: Vec<RouteJson>,
    /// Per known bot id, most requests first.
    pub bots: Vec<BotJson>,
    /// The 5 minutes with the most 429s.
    pub top_429_minutes: Vec<MinuteJson>,
    /// The 5 minutes with the most requests.
    pub busiest_minutes: Vec<MinuteJson>,
    /// Whether both top lists are exact: false when a record came for a minute already
    /// retired from the bounded table (a log over ~69 days read out of time order).
    pub minutes_exact: bool,
    /// Top clients by requests.
    pub top_talkers: TalkersJson,
    /// Rejections by the limit that rejected (when logged).
    pub limits: BTreeMap<String, u64>,
    /// How TTFB percentiles are computed.
    pub ttfb: &'static str,
}

/// Class counts by source.
#[derive(Debug, Serialize)]
pub struct ClassSourceJson {
    /// Records whose class was logged by crawlguard.
    pub logged: u64,
    /// Records classified from the User-Agent by the filter's classifier.
    pub classifier: u64,
}

/// One class.
#[derive(Debug, Serialize)]
pub struct ClassJson {
    /// Class name.
    pub class: &'static str,
    /// Its counters.
    #[serde(flatten)]
    pub group: GroupJson,
}

/// One route.
#[derive(Debug, Serialize)]
pub struct RouteJson {
    /// Route name.
    pub route: String,
    /// Its counters.
    #[serde(flatten)]
    pub group: GroupJson,
}

/// One bot id.
#[derive(Debug, Serialize)]
pub struct BotJson {
    /// Bot id (the filter's catalog).
    pub bot: String,
    /// The catalog class (granted once verified when `verify`).
    pub catalog_class: &'static str,
    /// Whether the claim needs verification.
    pub verify: bool,
    /// Its counters.
    #[serde(flatten)]
    pub group: GroupJson,
}

/// Counters of a class or bot.
#[derive(Debug, Serialize)]
pub struct GroupJson {
    /// Requests.
    pub requests: u64,
    /// Counts by status.
    pub status: StatusJson,
    /// Shares of requests (0..1).
    pub share: ShareJson,
    /// 429/503 by who produced them.
    pub rejections_by_origin: OriginJson,
    /// Upstream time percentiles, ms (`null` without upstream times).
    pub ttfb_ms: TtfbJson,
}

/// Counts by status.
#[derive(Debug, Serialize)]
pub struct StatusJson {
    /// 2xx.
    #[serde(rename = "2xx")]
    pub s2xx: u64,
    /// 3xx.
    #[serde(rename = "3xx")]
    pub s3xx: u64,
    /// 4xx other than 429.
    #[serde(rename = "4xx")]
    pub s4xx: u64,
    /// 429.
    #[serde(rename = "429")]
    pub s429: u64,
    /// 503.
    #[serde(rename = "503")]
    pub s503: u64,
    /// 5xx other than 503.
    #[serde(rename = "5xx")]
    pub s5xx: u64,
    /// 0, 1xx or out of range.
    pub other: u64,
}

/// Shares of requests.
#[derive(Debug, Serialize)]
pub struct ShareJson {
    /// 2xx.
    #[serde(rename = "2xx")]
    pub s2xx: f64,
    /// 429.
    #[serde(rename = "429")]
    pub s429: f64,
    /// 503.
    #[serde(rename = "503")]
    pub s503: f64,
    /// Every 5xx, 503 included.
    #[serde(rename = "5xx")]
    pub s5xx: f64,
}

/// Rejections by origin.
#[derive(Debug, Serialize)]
pub struct OriginJson {
    /// crawlguard's rate limit (`crawlguard_rate_limited`).
    pub crawlguard: u64,
    /// crawlguard's load shedding (`crawlguard_shed`).
    pub crawlguard_shed: u64,
    /// The upstream's (normalised by crawlguard or not).
    pub upstream: u64,
    /// Another Envoy filter, or Envoy itself.
    pub other_envoy: u64,
    /// Not told by the log.
    pub unknown: u64,
}

/// TTFB percentiles.
#[derive(Debug, Serialize)]
pub struct TtfbJson {
    /// Requests with an upstream time.
    pub n: u64,
    /// P50, ms.
    pub p50: Option<u32>,
    /// P95, ms.
    pub p95: Option<u32>,
    /// P99, ms.
    pub p99: Option<u32>,
}

/// One minute.
#[derive(Debug, Serialize)]
pub struct MinuteJson {
    /// `YYYY-MM-DD HH:MM` (UTC).
    pub minute: String,
    /// Requests.
    pub requests: u64,
    /// 429s.
    #[serde(rename = "429")]
    pub s429: u64,
    /// 429s and 503s.
    pub rejected: u64,
    /// 429s per class (classes with none left out).
    #[serde(rename = "429_by_class")]
    pub s429_by_class: BTreeMap<String, u64>,
}

/// Top talkers.
#[derive(Debug, Serialize)]
pub struct TalkersJson {
    /// Counts may be under the truth by at most this much (0: exact).
    pub error_bound: u64,
    /// Clients, most requests first.
    pub clients: Vec<TalkerJson>,
}

/// One client.
#[derive(Debug, Serialize)]
pub struct TalkerJson {
    /// Address as logged.
    pub client: String,
    /// Requests.
    pub requests: u64,
    /// 429/503 answers.
    pub rejected: u64,
    /// Class of its latest request.
    pub class: &'static str,
}

fn ms(v: Option<u32>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn group_row(name: String, g: &GroupJson) -> Vec<String> {
    let o = &g.rejections_by_origin;
    vec![
        name,
        g.requests.to_string(),
        pct(g.share.s2xx),
        pct(g.share.s429),
        pct(g.share.s503),
        pct(g.share.s5xx),
        o.crawlguard.to_string(),
        o.crawlguard_shed.to_string(),
        o.upstream.to_string(),
        (o.other_envoy + o.unknown).to_string(),
        g.ttfb_ms.n.to_string(),
        ms(g.ttfb_ms.p50),
        ms(g.ttfb_ms.p95),
        ms(g.ttfb_ms.p99),
    ]
}

const GROUP_HEAD: [&str; 13] = [
    "requests",
    "2xx",
    "429",
    "503",
    "5xx",
    "rej:cg",
    "rej:shed",
    "rej:up",
    "rej:other",
    "ttfb n",
    "p50 ms",
    "p95 ms",
    "p99 ms",
];

/// The report as aligned text tables.
pub fn render(j: &ReportJson) -> String {
    let mut out = String::new();
    let files: Vec<String> = j
        .inputs
        .iter()
        .map(|f| {
            let mut s = format!(
                "{}: {}, {} lines, {} parsed, {} unparsable",
                f.name,
                f.format.map_or("no format recognised", |f| f.as_str()),
                f.lines,
                f.parsed,
                f.unparsable
            );
            if f.too_long > 0 {
                s += &format!(
                    " ({} longer than {} bytes, skipped)",
                    f.too_long,
                    crate::input::MAX_LINE_BYTES
                );
            }
            if !f.unparsable_examples.is_empty() {
                let ex: Vec<String> = f.unparsable_examples.iter().map(u64::to_string).collect();
                s += &format!(" (line {})", ex.join(", "));
            }
            if let Some(e) = &f.error {
                s += &format!("; ERROR: {e}");
            }
            s
        })
        .collect();
    out += &format!(
        "crawlguard report: {} lines, {} parsed, {} unparsable\n",
        j.lines, j.parsed, j.unparsable
    );
    for f in files {
        out += &format!("  {f}\n");
    }
    if let (Some(a), Some(b)) = (&j.first, &j.last) {
        out += &format!("  time: {a} .. {b}\n");
    }
    out += &format!(
        "  class: {} logged by crawlguard, {} from the filter's classifier on the User-Agent \
         (crawler claims count as unverified_bot)\n",
        j.class_source.logged, j.class_source.classifier
    );
    out += "\nper class (shares of requests; rej: 429/503 by origin cg = crawlguard's rate \
            limit, shed = crawlguard's load shedding, up = upstream; ttfb = upstream time, \
            nearest rank)\n";
    let mut t = TextTable::new(std::iter::once("class").chain(GROUP_HEAD));
    for c in &j.classes {
        t.row(group_row(c.class.to_string(), &c.group));
    }
    out += &t.render();
    if j.routes.len() > 1 {
        out += "\nper route (crawlguard routes of the configuration, from the path)\n";
        let mut t = TextTable::new(std::iter::once("route").chain(GROUP_HEAD));
        for r in &j.routes {
            t.row(group_row(r.route.clone(), &r.group));
        }
        out += &t.render();
    }
    if !j.bots.is_empty() {
        out += "\nper bot id (known bots; class = the catalog's, granted only when verified)\n";
        let mut t = TextTable::new(["bot", "class"].into_iter().chain(GROUP_HEAD));
        for b in &j.bots {
            let mut row = group_row(b.bot.clone(), &b.group);
            let class = if b.verify {
                format!("{} (verify)", b.catalog_class)
            } else {
                b.catalog_class.to_string()
            };
            row.insert(1, class);
            t.row(row);
        }
        out += &t.render();
    }
    let minutes = |title: &str, v: &[MinuteJson]| -> String {
        let mut s = format!("\n{title}\n");
        if v.is_empty() {
            s += "  none\n";
            return s;
        }
        let mut t = TextTable::new(["minute (UTC)", "requests", "429", "429+503", "429 by class"]);
        for m in v {
            let by: Vec<String> = m
                .s429_by_class
                .iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect();
            t.row(vec![
                m.minute.clone(),
                m.requests.to_string(),
                m.s429.to_string(),
                m.rejected.to_string(),
                by.join(", "),
            ]);
        }
        s += &t.render();
        s
    };
    out += &minutes("top 5 minutes by 429 count", &j.top_429_minutes);
    out += &minutes("busiest 5 minutes", &j.busiest_minutes);
    if !j.minutes_exact {
        out += &format!(
            "  (approximate: over {} minutes of log read out of time order)\n",
            crate::minutes::MAX_MINUTE_ROWS
        );
    }
    out += &format!(
        "\ntop talkers by client address{}\n",
        if j.top_talkers.error_bound == 0 {
            " (exact)".to_string()
        } else {
            format!(
                " (counts may be low by up to {})",
                j.top_talkers.error_bound
            )
        }
    );
    let mut t = TextTable::new(["client", "requests", "429/503", "class (latest)"]);
    for c in &j.top_talkers.clients {
        t.row(vec![
            c.client.clone(),
            c.requests.to_string(),
            c.rejected.to_string(),
            c.class.to_string(),
        ]);
    }
    out += &t.render();
    if !j.limits.is_empty() {
        out += "\nrejections by limit (logged RateLimit-Policy)\n";
        let mut t = TextTable::new(["limit", "rejections"]);
        for (l, n) in &j.limits {
            t.row(vec![l.clone(), n.to_string()]);
        }
        out += &t.render();
    }
    out
}
