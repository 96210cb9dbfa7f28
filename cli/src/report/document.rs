//! The `report --json` document (schema [`SCHEMA`]): its types, and how a [`Report`]
//! fills them.

use super::{Report, SCHEMA};
use crate::input::FileStats;
use crate::minutes::Minute;
use crate::time;
use crawlguard_core::identity::classify::Class;
use serde::Serialize;
use std::collections::BTreeMap;

impl Report {
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
