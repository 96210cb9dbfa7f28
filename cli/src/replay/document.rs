//! The `replay --json` document (schema [`SCHEMA`]): its types, and how a finished
//! [`Replay`] fills them.

use super::{Prediction, Replay, CRAWLER_WARN_SHARE, SCHEMA};
use crate::status::StatusBucket;
use crate::table::share;
use crate::time;
use crawlguard_core::config::BrowserCheckMode;
use crawlguard_core::identity::catalog::builtin_browser_checks;
use crawlguard_core::identity::classify::Class;
use serde::Serialize;

impl Replay {
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
            mode: cfg.mode.as_str(),
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
            limits: super::replayed_limits(cfg)
                .zip(&self.limits)
                .map(|(l, c)| LimitRow {
                    limit: l.name.clone(),
                    class: l.class.map_or("*", Class::as_str),
                    route: l
                        .route
                        .map_or("*".to_string(), |r| cfg.route_name(r).to_string()),
                    key: l.key_label(),
                    rate_per_s: l.bucket.map(|b| b.rate_per_s),
                    burst: l.bucket.map(|b| b.burst),
                    max_in_flight: l.max_in_flight,
                    mode: l.mode.as_str(),
                    cost_reserve: l.cost.as_ref().map(|c| c.reserve),
                    admitted: c.admitted,
                    rejected: c.rejected,
                    shadow_limited: c.shadow_limited,
                })
                .collect(),
            exempt: self.exempt,
            exempt_rejected: self.exempt_rejected,
            status_vs_prediction: StatusBucket::ALL
                .iter()
                .zip(&self.matrix)
                .map(|(a, row)| {
                    let n = |p: Prediction| row.get(p.index()).copied().unwrap_or(0);
                    MatrixRow {
                        actual: a.as_str(),
                        admitted: n(Prediction::Admitted),
                        rejected_429: n(Prediction::Rejected429),
                        rejected_503: n(Prediction::Rejected503),
                        shadow_limited: n(Prediction::ShadowLimited),
                        exempt: n(Prediction::Exempt),
                    }
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
                    class: class.map_or("-", Class::as_str),
                })
                .collect(),
            top_limited_error_bound: self.limited_clients.error(),
            no_client_address: self.no_client,
            no_browser_signals: if (0..builtin_browser_checks().len())
                .all(|i| cfg.browser_checks.mode(i) == BrowserCheckMode::Off)
            {
                0
            } else {
                self.no_signals
            },
            browser_signals_not_configured: self.signals_not_configured,
            header_keyed_limits: cfg
                .limits
                .iter()
                .filter(|l| {
                    // The log carries the User-Agent; every other header is missing.
                    l.key
                        .parts()
                        .iter()
                        .any(|p| p.header_name().is_some_and(|h| h != "user-agent"))
                })
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
            in_flight_limits: cfg
                .limits
                .iter()
                .filter_map(|l| {
                    let what = match (l.max_in_flight, &l.cost) {
                        (Some(m), _) => format!("{} (max_in_flight {m})", l.name),
                        (None, Some(c)) => {
                            format!("{} (cost.max_in_flight {})", l.name, c.max_in_flight)
                        }
                        (None, None) => return None,
                    };
                    Some(what)
                })
                .collect(),
            forwarded_without_duration: self.without_duration,
            shedding_not_replayed: self.shedding,
            fleet_as_one_envoy: self.fleet,
            unresolved: self.unresolved,
            warnings,
        }
    }
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
    /// Requests for exempt paths.
    pub exempt: u64,
    /// Of those, rejected by the exempt paths' own limit (`exempt_limit`).
    pub exempt_rejected: u64,
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
    /// Requests whose line does not say whether they came over TLS (no `tls` field): the
    /// browser checks that need TLS, the handshake or the network pass for them (0 when
    /// every check is off).
    pub no_browser_signals: u64,
    /// Requests whose log carries a JA4 or an ASN that this configuration does not read
    /// (`client_signals.ja4_header` / `asn_header` unset): their checks were not run.
    pub browser_signals_not_configured: u64,
    /// Limits keyed by a request header (access logs carry none: every request is keyed
    /// as "header missing").
    pub header_keyed_limits: Vec<String>,
    /// Cost-based limits, as `name (reserve N, from <header>)`: access logs carry no
    /// response headers, so every forwarded request is settled at its reservation.
    pub cost_limits: Vec<String>,
    /// Limits that bound requests in flight, as `name (max_in_flight N)` or `name
    /// (cost.max_in_flight N)`: replayed from each request's logged duration.
    pub in_flight_limits: Vec<String>,
    /// Forwarded requests whose log line had no duration (replayed as ending at once, so
    /// the limits above saw them in flight for no time); counted only when there are such
    /// limits.
    pub forwarded_without_duration: u64,
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
    /// Rate (`null`: a limit of requests in flight only).
    pub rate_per_s: Option<f64>,
    /// Burst (`null`: a limit of requests in flight only).
    pub burst: Option<u32>,
    /// Requests of one key in flight at once (`null`: not bounded).
    pub max_in_flight: Option<u16>,
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
