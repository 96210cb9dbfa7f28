//! `crawlguard replay`: what a configuration would have done to the traffic of a log.
//!
//! Every record becomes a request driven through the filter's own request machine
//! (the worker, classification, verification with its verdict cache and
//! callouts, the limits over the shared-store slot table, and the response path), with an
//! in-memory store and a virtual clock read from the log: request `i` happens at
//! `t0 + (ts_i - ts_0) / speed`. Verifier callouts are answered at once: from `--ranges`
//! like the sidecar would ([`Offline`]), or, without it, `unknown` (claims stay
//! `unverified_bot`, as when no verifier is reachable).
//!
//! Shadow mode (the global `mode`, or a limit's own `limits[].mode`) is replayed as it is:
//! a request a shadow limit would have rejected is forwarded, and counted `shadow_limited`
//! against that limit, as the filter counts it.
//!
//! Three settings are changed in the replayed copy of the configuration: `ratelimit_headers`
//! is on, so each rejection names its limit (it changes no decision); `shedding` is off:
//! shedding follows the origin's response times under the load the configuration lets
//! through, which no log of other traffic can give, so a replay does not shed (and says so);
//! and `fleet` is off: the log is decided by one Envoy holding each limit whole, which is
//! what fleet mode approximates for the fleet's combined traffic (a replica that never
//! synced decides the same), without the sync delays (said too).
//! What else a log cannot tell is said in the output too: limits keyed by a request header
//! see it missing, and cost-based limits settle every request at its reservation (the cost
//! is a response header, not logged).

use crate::host::{ReplayProxy, Request};
use crate::logfmt::LogRecord;
use crate::offline::{self, Offline, OfflineVerdict};
use crate::report::Client;
use crate::stats::Heavy;
use crate::status::StatusBucket;
use crate::table::{pct, TextTable};
use crate::time;
use crawlguard::classify::Class;
use crawlguard::config::{Config, KeyKind, Mode};
use crawlguard::request::path_only;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv6Addr;

/// Schema name and version of `replay --json`.
pub const SCHEMA: &str = "crawlguard.replay/v1";

/// The rejection share above which a verified-crawler class gets a warning.
pub const CRAWLER_WARN_SHARE: f64 = 0.01;

/// Admitted / rejected / shadow-limited counts.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct DecisionCounts {
    /// Forwarded upstream, every matching limit passed (the filter's `allowed`).
    pub admitted: u64,
    /// Rejected by crawlguard (429 or 503; the filter's `limited`).
    pub rejected: u64,
    /// Forwarded, but a limit in shadow mode would have rejected it (the filter's
    /// `shadow_limited`).
    pub shadow_limited: u64,
}

impl DecisionCounts {
    fn total(&self) -> u64 {
        self.admitted + self.rejected + self.shadow_limited
    }
}

/// Predicted decision columns of the status matrix.
const PREDICTED: [&str; 5] = [
    "admitted",
    "rejected 429",
    "rejected 503",
    "shadow-limited",
    "exempt",
];
/// A replay in progress.
pub struct Replay {
    proxy: ReplayProxy,
    /// The configuration's global mode is shadow.
    shadow: bool,
    /// The configuration sheds load (`shedding.enabled`); not replayed.
    shedding: bool,
    /// The configuration syncs limits across a fleet (`fleet.enabled`); replayed as one
    /// Envoy.
    fleet: bool,
    speed: f64,
    offline: Option<Offline>,
    first_ms: Option<i64>,
    last_ms: i64,
    last_ns: u64,
    downstream: String,
    limit_index: BTreeMap<String, usize>,
    /// Per class ([`Class::index`]).
    pub classes: [DecisionCounts; 8],
    /// Per route index (`routes.len()` = `default`).
    pub routes: Vec<DecisionCounts>,
    /// Per limit: forwarded requests it applied to and did not object to, rejections it
    /// caused, and requests it would have rejected in shadow mode.
    pub limits: Vec<DecisionCounts>,
    /// Exempt paths (never limited, no class).
    pub exempt: u64,
    /// Actual status (rows, by [`StatusBucket`]) x predicted decision (columns,
    /// [`PREDICTED`]).
    pub matrix: [[u64; 5]; StatusBucket::COUNT],
    /// Clients by rejections.
    pub limited_clients: Heavy<Client, Option<Class>>,
    /// Verifier answers given, by bot and verdict.
    pub verdicts: BTreeMap<(String, OfflineVerdict), u64>,
    /// Upstream 429/503 the response path would have normalised.
    pub normalised: u64,
    /// Requests with no client address in the log.
    pub no_client: u64,
    /// Requests still waiting for a verdict after every callout was answered (should be 0).
    pub unresolved: u64,
    /// Records replayed.
    pub requests: u64,
}

impl Replay {
    /// A replay of `cfg` at `speed` (log seconds per replayed second, >= 1 compresses).
    pub fn new(mut cfg: Config, speed: f64, offline: Option<Offline>) -> Replay {
        let shadow = cfg.mode == Mode::Shadow;
        let shedding = cfg.shedding.enabled;
        cfg.ratelimit_headers = true;
        cfg.shedding.enabled = false;
        let fleet = cfg.fleet.enabled;
        cfg.fleet.enabled = false;
        let limit_index = cfg
            .limits
            .iter()
            .enumerate()
            .map(|(i, l)| (l.name.clone(), i))
            .collect();
        let routes = vec![DecisionCounts::default(); cfg.routes.len() + 1];
        let limits = vec![DecisionCounts::default(); cfg.limits.len()];
        let proxy = ReplayProxy::new(cfg);
        Replay {
            proxy,
            shadow,
            shedding,
            fleet,
            speed: if speed.is_finite() && speed > 0.0 {
                speed
            } else {
                1.0
            },
            offline,
            first_ms: None,
            last_ms: 0,
            last_ns: 0,
            downstream: String::new(),
            limit_index,
            classes: Default::default(),
            routes,
            limits,
            exempt: 0,
            matrix: [[0; 5]; StatusBucket::COUNT],
            limited_clients: Heavy::new(crate::report::TALKER_CAPACITY),
            verdicts: BTreeMap::new(),
            normalised: 0,
            no_client: 0,
            unresolved: 0,
            requests: 0,
        }
    }

    /// The configuration being replayed (`ratelimit_headers` on, `shedding` and `fleet` off,
    /// see the module docs).
    pub fn config(&self) -> &Config {
        &self.proxy.worker.cfg
    }

    /// The virtual time of a record at `ts_ms`, ns; never goes backwards.
    fn clock(&mut self, ts_ms: i64) -> u64 {
        let first = *self.first_ms.get_or_insert(ts_ms);
        self.last_ms = self.last_ms.max(ts_ms);
        let base = u64::try_from(first).unwrap_or(0).saturating_mul(1_000_000);
        let off_ms = (ts_ms - first) as f64 / self.speed;
        let now = base.saturating_add((off_ms.max(0.0) * 1e6) as u64);
        self.last_ns = self.last_ns.max(now);
        self.last_ns
    }

    /// Replays one record.
    pub fn add(&mut self, r: &LogRecord<'_>) {
        self.requests += 1;
        let now = self.clock(r.ts_ms);
        self.proxy.host.now_ns = now;
        self.downstream.clear();
        match r.client {
            // An address as logged: the filter's own parser reads it (with or without a
            // port, IPv4 or IPv6; anything it cannot parse is its "unknown client" key).
            Some(c)
                if c.iter()
                    .all(|b| b.is_ascii_hexdigit() || b".:[]".contains(b)) =>
            {
                self.downstream
                    .push_str(std::str::from_utf8(c).unwrap_or_default());
            }
            Some(c) => {
                // A host name instead of an address: a distinct documentation-prefix
                // address per name, so different clients keep different buckets.
                let h = fnv(c);
                let ip = Ipv6Addr::new(
                    0x2001,
                    0xdb8,
                    (h >> 48) as u16,
                    (h >> 32) as u16,
                    (h >> 16) as u16,
                    h as u16,
                    0,
                    1,
                );
                let _ = write!(self.downstream, "[{ip}]:0");
            }
            None => self.no_client += 1,
        }
        let req = Request {
            path: r.path,
            method: r.method,
            ua: r.ua,
            xff: r.xff,
            downstream: (!self.downstream.is_empty()).then_some(self.downstream.as_bytes()),
        };
        let offline = &self.offline;
        let verdicts = &mut self.verdicts;
        let out = self.proxy.run(&req, r.status, &mut |path| {
            let (body, bot, v) = offline::answer(offline.as_ref(), path);
            *verdicts.entry((bot, v)).or_insert(0) += 1;
            (200, body)
        });
        if out.unresolved {
            self.unresolved += 1;
        }
        let row = StatusBucket::of(r.status).index();
        let route = self.config().route_of(path_only(r.path));
        let limit = out
            .policy
            .as_deref()
            .and_then(|v| crate::logfmt::limit_name(v.as_bytes()))
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| self.limit_index.get(n).copied());
        match (out.reply, out.class) {
            (Some(status), class) => {
                let class = class.unwrap_or(Class::Human);
                if let Some(c) = self.classes.get_mut(class.index()) {
                    c.rejected += 1;
                }
                if let Some(c) = self.routes.get_mut(route) {
                    c.rejected += 1;
                }
                if let Some(c) = limit.and_then(|i| self.limits.get_mut(i)) {
                    c.rejected += 1;
                }
                let col = if status == 503 { 2 } else { 1 };
                self.bump(row, col);
                self.limited_clients
                    .add(&Client::from_log(r.client), |c| *c = Some(class));
            }
            (None, Some(class)) => {
                let shadow = out.shadow_limit;
                let tally = |c: &mut DecisionCounts| {
                    if shadow.is_some() {
                        c.shadow_limited += 1;
                    } else {
                        c.admitted += 1;
                    }
                };
                if let Some(c) = self.classes.get_mut(class.index()) {
                    tally(c);
                }
                if let Some(c) = self.routes.get_mut(route) {
                    tally(c);
                }
                let cfg = &self.proxy.worker.cfg;
                for (i, l) in cfg.limits.iter().enumerate() {
                    let matches =
                        l.class.is_none_or(|c| c == class) && l.route.is_none_or(|rt| rt == route);
                    if let Some(c) = self.limits.get_mut(i).filter(|_| matches) {
                        if shadow == Some(i) {
                            c.shadow_limited += 1;
                        } else {
                            c.admitted += 1;
                        }
                    }
                }
                if shadow.is_some() {
                    self.bump(row, 3);
                    self.limited_clients
                        .add(&Client::from_log(r.client), |c| *c = Some(class));
                } else {
                    self.bump(row, 0);
                }
                if out.normalised {
                    self.normalised += 1;
                }
            }
            (None, None) => {
                self.exempt += 1;
                self.bump(row, 4);
            }
        }
    }

    fn bump(&mut self, row: usize, col: usize) {
        if let Some(c) = self.matrix.get_mut(row).and_then(|r| r.get_mut(col)) {
            *c += 1;
        }
    }

    /// The result as the `--json` document.
    pub fn json(&self, top: usize) -> ReplayJson {
        let cfg = self.config();
        let classes = Class::ALL
            .iter()
            .filter_map(|c| {
                let n = self.classes.get(c.index())?;
                (n.total() > 0).then(|| ClassRow {
                    class: c.as_str(),
                    admitted: n.admitted,
                    rejected: n.rejected,
                    rejected_share: share(n.rejected, n.total()),
                    shadow_limited: n.shadow_limited,
                    shadow_limited_share: share(n.shadow_limited, n.total()),
                })
            })
            .collect::<Vec<_>>();
        // A shadow limit's would-be rejections count: they are what enforcing it would send.
        let warnings = classes
            .iter()
            .filter(|c| {
                Class::parse(c.class).is_some_and(Class::is_crawler)
                    && c.rejected_share + c.shadow_limited_share > CRAWLER_WARN_SHARE
            })
            .map(|c| {
                let total = c.admitted + c.rejected + c.shadow_limited;
                format!(
                    "verified crawlers of class {} would see {:.1}% rejections ({} of {}{}): \
                     over the 1% that makes search engines and AI crawlers back off",
                    c.class,
                    share(c.rejected + c.shadow_limited, total) * 100.0,
                    c.rejected + c.shadow_limited,
                    total,
                    if c.shadow_limited > 0 {
                        format!(", {} of them by limits in shadow mode", c.shadow_limited)
                    } else {
                        String::new()
                    }
                )
            })
            .collect();
        ReplayJson {
            schema: SCHEMA,
            mode: if self.shadow { "shadow" } else { "enforce" },
            speed: self.speed,
            requests: self.requests,
            first: self.first_ms.map(time::fmt_ms),
            last: self.first_ms.map(|_| time::fmt_ms(self.last_ms)),
            replayed_seconds: self
                .first_ms
                .map_or(0.0, |f| (self.last_ms - f) as f64 / 1000.0 / self.speed),
            verification: match &self.offline {
                Some(o) => format!(
                    "offline from --ranges ({}; {} prefixes): in range -> verified; otherwise \
                     as the sidecar would, except that claims only FCrDNS could decide are \
                     unknown (no DNS in a replay)",
                    o.description.join(", "),
                    o.prefixes()
                ),
                None => "none (no --ranges): every crawler claim is unverified, class \
                         unverified_bot"
                    .into(),
            },
            verdicts: self
                .verdicts
                .iter()
                .map(|((bot, v), n)| VerdictRow {
                    bot: bot.clone(),
                    verdict: v.label(),
                    callouts: *n,
                })
                .collect(),
            classes,
            routes: self
                .routes
                .iter()
                .enumerate()
                .filter(|(_, c)| c.total() > 0)
                .map(|(i, c)| RouteRow {
                    route: cfg.route_name(i).to_string(),
                    admitted: c.admitted,
                    rejected: c.rejected,
                    shadow_limited: c.shadow_limited,
                })
                .collect(),
            limits: cfg
                .limits
                .iter()
                .zip(&self.limits)
                .map(|(l, c)| LimitRow {
                    limit: l.name.clone(),
                    class: l.class.map_or("*", Class::as_str),
                    route: l
                        .route
                        .map_or("*".to_string(), |r| cfg.route_name(r).to_string()),
                    key: match &l.key {
                        KeyKind::Header(h) => format!("header:{h}"),
                        k => k.kind_str().to_string(),
                    },
                    rate_per_s: l.rate_per_s,
                    burst: l.burst,
                    mode: mode_str(l.mode),
                    cost_reserve: l.cost.as_ref().map(|c| c.reserve),
                    admitted: c.admitted,
                    rejected: c.rejected,
                    shadow_limited: c.shadow_limited,
                })
                .collect(),
            exempt: self.exempt,
            status_vs_prediction: StatusBucket::ALL
                .iter()
                .zip(&self.matrix)
                .map(|(a, row)| MatrixRow {
                    actual: a.as_str(),
                    admitted: row[0],
                    rejected_429: row[1],
                    rejected_503: row[2],
                    shadow_limited: row[3],
                    exempt: row[4],
                })
                .collect(),
            normalised_upstream: self.normalised,
            top_limited_clients: self
                .limited_clients
                .top(top)
                .into_iter()
                .map(|(c, n, class)| LimitedClientRow {
                    client: c.to_string(),
                    rejected: n,
                    class: class.map_or("", Class::as_str),
                })
                .collect(),
            top_limited_error_bound: self.limited_clients.error(),
            no_client_address: self.no_client,
            header_keyed_limits: cfg
                .limits
                .iter()
                .filter(|l| matches!(l.key, KeyKind::Header(_)))
                .map(|l| l.name.clone())
                .collect(),
            cost_limits: cfg
                .limits
                .iter()
                .filter_map(|l| {
                    let c = l.cost.as_ref()?;
                    Some(format!(
                        "{} (reserve {}, from {})",
                        l.name, c.reserve, c.from_response_header
                    ))
                })
                .collect(),
            shedding_not_replayed: self.shedding,
            fleet_as_one_envoy: self.fleet,
            unresolved: self.unresolved,
            warnings,
        }
    }
}

fn mode_str(m: Mode) -> &'static str {
    match m {
        Mode::Enforce => "enforce",
        Mode::Shadow => "shadow",
    }
}

fn share(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 / d as f64
    }
}

/// FNV-1a, for mapping host names to stable addresses.
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `replay --json` document (schema [`SCHEMA`], documented in the README).
#[derive(Debug, Serialize)]
pub struct ReplayJson {
    /// `crawlguard.replay/v1`.
    pub schema: &'static str,
    /// The configuration's global mode (`shadow`: nothing is rejected; see each limit's).
    pub mode: &'static str,
    /// Time compression.
    pub speed: f64,
    /// Requests replayed.
    pub requests: u64,
    /// First log time.
    pub first: Option<String>,
    /// Last log time.
    pub last: Option<String>,
    /// The log's span divided by the speed, s.
    pub replayed_seconds: f64,
    /// How crawler claims were verified.
    pub verification: String,
    /// Verifier answers, by bot and verdict.
    pub verdicts: Vec<VerdictRow>,
    /// Per class.
    pub classes: Vec<ClassRow>,
    /// Per route.
    pub routes: Vec<RouteRow>,
    /// Per limit.
    pub limits: Vec<LimitRow>,
    /// Exempt paths.
    pub exempt: u64,
    /// Actual status x predicted decision.
    pub status_vs_prediction: Vec<MatrixRow>,
    /// Upstream 429/503 the response path would have normalised.
    pub normalised_upstream: u64,
    /// Clients with the most rejections.
    pub top_limited_clients: Vec<LimitedClientRow>,
    /// Their counts may be low by at most this much (0: exact).
    pub top_limited_error_bound: u64,
    /// Requests without a client address in the log (they share one key).
    pub no_client_address: u64,
    /// Limits keyed by a request header (access logs carry none: every request is keyed
    /// as "header missing").
    pub header_keyed_limits: Vec<String>,
    /// Cost-based limits, as `name (reserve N, from <header>)`: access logs carry no
    /// response headers, so every forwarded request is settled at its reservation.
    pub cost_limits: Vec<String>,
    /// The configuration sheds load (`shedding.enabled`), which a replay does not model:
    /// no request is shed.
    pub shedding_not_replayed: bool,
    /// The configuration syncs its limits across a fleet (`fleet.enabled`): the log is
    /// decided as by one Envoy holding each limit whole, without sync delays.
    pub fleet_as_one_envoy: bool,
    /// Requests left waiting for a verdict (0 unless something is wrong).
    pub unresolved: u64,
    /// Warnings (a verified-crawler class over 1% rejections).
    pub warnings: Vec<String>,
}

/// Verifier answers for one bot and verdict.
#[derive(Debug, Serialize)]
pub struct VerdictRow {
    /// Bot id.
    pub bot: String,
    /// Verdict (with how it was reached).
    pub verdict: &'static str,
    /// Callouts answered so.
    pub callouts: u64,
}

/// One class.
#[derive(Debug, Serialize)]
pub struct ClassRow {
    /// Class.
    pub class: &'static str,
    /// Admitted.
    pub admitted: u64,
    /// Rejected.
    pub rejected: u64,
    /// Rejected share (0..1).
    pub rejected_share: f64,
    /// Shadow-limited (forwarded; a shadow limit would have rejected it).
    pub shadow_limited: u64,
    /// Shadow-limited share (0..1).
    pub shadow_limited_share: f64,
}

/// One route.
#[derive(Debug, Serialize)]
pub struct RouteRow {
    /// Route name.
    pub route: String,
    /// Admitted.
    pub admitted: u64,
    /// Rejected.
    pub rejected: u64,
    /// Shadow-limited.
    pub shadow_limited: u64,
}

/// One limit.
#[derive(Debug, Serialize)]
pub struct LimitRow {
    /// Name.
    pub limit: String,
    /// Class (`*` = every class).
    pub class: &'static str,
    /// Route (`*` = every route).
    pub route: String,
    /// Key kind.
    pub key: String,
    /// Rate.
    pub rate_per_s: f64,
    /// Burst.
    pub burst: u32,
    /// `enforce` or `shadow` (its own `mode`, else the global one).
    pub mode: &'static str,
    /// Tokens a request reserves (cost-based limits; `null`: one token per request).
    pub cost_reserve: Option<u32>,
    /// Forwarded requests it applied to and did not object to.
    pub admitted: u64,
    /// Rejections it caused.
    pub rejected: u64,
    /// Requests it would have rejected (shadow mode; forwarded).
    pub shadow_limited: u64,
}

/// One row of the status matrix.
#[derive(Debug, Serialize)]
pub struct MatrixRow {
    /// Actual status group.
    pub actual: &'static str,
    /// Predicted admitted.
    pub admitted: u64,
    /// Predicted rejected with 429.
    pub rejected_429: u64,
    /// Predicted rejected with 503.
    pub rejected_503: u64,
    /// Predicted forwarded, shadow-limited.
    pub shadow_limited: u64,
    /// Exempt path.
    pub exempt: u64,
}

/// A client that would be limited.
#[derive(Debug, Serialize)]
pub struct LimitedClientRow {
    /// Address as logged.
    pub client: String,
    /// Rejections.
    pub rejected: u64,
    /// Its class when rejected.
    pub class: &'static str,
}

/// The replay as aligned text.
pub fn render(j: &ReplayJson, config_name: &str, summary: &str) -> String {
    let mut out = format!(
        "crawlguard replay: {config_name} ({summary})\n  {} requests, {} .. {}, speed {}x \
         ({:.1} s of replayed time)\n  verification: {}\n",
        j.requests,
        j.first.as_deref().unwrap_or("-"),
        j.last.as_deref().unwrap_or("-"),
        j.speed,
        j.replayed_seconds,
        j.verification
    );
    // Columns for shadow limits only when the configuration has some.
    let shadow_limits: Vec<&str> = j
        .limits
        .iter()
        .filter(|l| l.mode == "shadow")
        .map(|l| l.limit.as_str())
        .collect();
    let any_shadow = !shadow_limits.is_empty();
    if j.mode == "shadow" {
        out += "  mode shadow: limits in shadow mode reject nothing; \"shadow-limited\" below is \
                what the filter would count as shadow_limited (enforcing can reject more: \
                escalation applies to enforced limits only)\n";
    } else if any_shadow {
        out += &format!(
            "  limits in shadow mode ({}) reject nothing; \"shadow-limited\" below is what \
             they would have rejected\n",
            shadow_limits.join(", ")
        );
    }
    if !j.verdicts.is_empty() {
        out += "\nverifier callouts answered\n";
        let mut t = TextTable::new(["bot", "verdict", "callouts"]);
        for v in &j.verdicts {
            t.row(vec![
                v.bot.clone(),
                v.verdict.to_string(),
                v.callouts.to_string(),
            ]);
        }
        out += &t.render();
    }
    let shadow_head: &[&str] = if any_shadow {
        &["shadow-limited", "shadow-limited %"]
    } else {
        &[]
    };
    out += "\nper class\n";
    let mut t = TextTable::new(
        ["class", "requests", "admitted", "rejected", "rejected %"]
            .iter()
            .chain(shadow_head),
    );
    for c in &j.classes {
        let mut row = vec![
            c.class.to_string(),
            (c.admitted + c.rejected + c.shadow_limited).to_string(),
            c.admitted.to_string(),
            c.rejected.to_string(),
            pct(c.rejected_share),
        ];
        if any_shadow {
            row.push(c.shadow_limited.to_string());
            row.push(pct(c.shadow_limited_share));
        }
        t.row(row);
    }
    if j.exempt > 0 {
        let mut row = vec![
            "(exempt paths)".into(),
            j.exempt.to_string(),
            j.exempt.to_string(),
            "0".into(),
            pct(0.0),
        ];
        if any_shadow {
            row.push("0".into());
            row.push(pct(0.0));
        }
        t.row(row);
    }
    out += &t.render();
    out += "\nper route\n";
    let mut t = TextTable::new(
        ["route", "admitted", "rejected", "rejected %"]
            .iter()
            .chain(shadow_head),
    );
    for r in &j.routes {
        let total = r.admitted + r.rejected + r.shadow_limited;
        let mut row = vec![
            r.route.clone(),
            r.admitted.to_string(),
            r.rejected.to_string(),
            pct(share(r.rejected, total)),
        ];
        if any_shadow {
            row.push(r.shadow_limited.to_string());
            row.push(pct(share(r.shadow_limited, total)));
        }
        t.row(row);
    }
    out += &t.render();
    out +=
        "\nper limit (admitted = forwarded requests the limit applied to and did not object to)\n";
    let mut head = vec![
        "limit", "class", "route", "key", "rate/s", "burst", "admitted", "rejected",
    ];
    if any_shadow {
        head.extend(["mode", "shadow-limited"]);
    }
    let mut t = TextTable::new(head);
    for l in &j.limits {
        let mut row = vec![
            l.limit.clone(),
            l.class.to_string(),
            l.route.clone(),
            l.key.clone(),
            format!("{}", l.rate_per_s),
            l.burst.to_string(),
            l.admitted.to_string(),
            l.rejected.to_string(),
        ];
        if any_shadow {
            row.push(l.mode.to_string());
            row.push(l.shadow_limited.to_string());
        }
        t.row(row);
    }
    out += &t.render();
    out += "\nactual status (log) x predicted decision (this configuration)\n";
    let predicted = PREDICTED
        .iter()
        .enumerate()
        .filter(|(i, _)| any_shadow || *i != 3)
        .map(|(_, p)| *p);
    let mut t = TextTable::new(["actual"].into_iter().chain(predicted));
    for m in &j.status_vs_prediction {
        if m.admitted + m.rejected_429 + m.rejected_503 + m.shadow_limited + m.exempt == 0 {
            continue;
        }
        let mut row = vec![
            m.actual.to_string(),
            m.admitted.to_string(),
            m.rejected_429.to_string(),
            m.rejected_503.to_string(),
        ];
        if any_shadow {
            row.push(m.shadow_limited.to_string());
        }
        row.push(m.exempt.to_string());
        t.row(row);
    }
    out += &t.render();
    if j.normalised_upstream > 0 {
        out += &format!(
            "  upstream 429/503 the response path would normalise: {}\n",
            j.normalised_upstream
        );
    }
    out += &format!(
        "\nclients that would be limited most{}\n",
        if j.top_limited_error_bound == 0 {
            String::new()
        } else {
            format!(
                " (counts may be low by up to {})",
                j.top_limited_error_bound
            )
        }
    );
    if j.top_limited_clients.is_empty() {
        out += "  none\n";
    } else {
        let n = if any_shadow {
            "rejected or shadow-limited"
        } else {
            "rejected"
        };
        let mut t = TextTable::new(["client", n, "class"]);
        for c in &j.top_limited_clients {
            t.row(vec![
                c.client.clone(),
                c.rejected.to_string(),
                c.class.to_string(),
            ]);
        }
        out += &t.render();
    }
    let mut notes = Vec::new();
    if j.no_client_address > 0 {
        notes.push(format!(
            "{} requests had no client address in the log: they share one client_ip key",
            j.no_client_address
        ));
    }
    if !j.header_keyed_limits.is_empty() {
        notes.push(format!(
            "limits keyed by a request header ({}) see it missing: access logs carry no \
             request headers, so those requests share the \"missing\" key",
            j.header_keyed_limits.join(", ")
        ));
    }
    if !j.cost_limits.is_empty() {
        notes.push(format!(
            "cost-based limits ({}) charge every forwarded request its reserve: the actual \
             cost is a response header, which access logs do not carry, so each request is \
             settled at its reservation (as the filter settles a missing header)",
            j.cost_limits.join(", ")
        ));
    }
    if j.shedding_not_replayed {
        notes.push(
            "shedding is enabled but not replayed: it follows the origin's response times \
             under the load this configuration would let through, which a log of other \
             traffic cannot give; no request was shed"
                .to_string(),
        );
    }
    if j.fleet_as_one_envoy {
        notes.push(
            "fleet mode is on: every request is decided against the whole fleet-wide limit, \
             as by one Envoy (right for the fleet's combined traffic, e.g. a load balancer's \
             log; one replica's log would get only its share); the overshoot of sync delays \
             is not replayed"
                .to_string(),
        );
    }
    if j.unresolved > 0 {
        notes.push(format!(
            "{} requests were left waiting for a verdict",
            j.unresolved
        ));
    }
    if !notes.is_empty() {
        out += "\nnotes\n";
        for n in notes {
            out += &format!("  {n}\n");
        }
    }
    for w in &j.warnings {
        out += &format!("\nWARNING: {w}\n");
    }
    out
}
