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
//! Requests in flight (a limit's `max_in_flight`, a cost-based limit's `cost.max_in_flight`)
//! need each request's end: a forwarded request's stream stays open until its start plus the
//! duration the log gives (`%DURATION%`, `duration_ms`, nginx's `$request_time`), divided by
//! the speed like every other time, and its places in flight count meanwhile. A record
//! without a duration ends at once, and the output says how many had none.
//!
//! What else a log cannot tell is said in the output too: limits keyed by a request header
//! see it missing, and cost-based limits settle every request at its reservation (the cost

mod document;
mod render;

pub use document::{
    ClassRow, LimitRow, LimitedClientRow, MatrixRow, ReplayJson, RouteRow, VerdictRow,
};
pub use render::render;

use crate::host::{ReplayProxy, Request};
use crate::logfmt::LogRecord;
use crate::offline::{self, Offline, OfflineVerdict};
use crate::replay_store::{fnv1a, FNV_OFFSET_BASIS};
use crate::report::Client;
use crate::stats::Heavy;
use crate::status::StatusBucket;
use crawlguard_core::config::{Config, Limit};
use crawlguard_core::identity::classify::Class;
use crawlguard_core::request::{path_only, RequestState};
use serde::Serialize;
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::net::Ipv6Addr;
use std::rc::Rc;

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

/// What the configuration would have done with a request: the columns of the status
/// matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prediction {
    /// Forwarded, every matching limit passed.
    Admitted,
    /// Rejected with 429.
    Rejected429,
    /// Rejected with 503.
    Rejected503,
    /// Forwarded, but a limit in shadow mode would have rejected it.
    ShadowLimited,
    /// An exempt path.
    Exempt,
}

impl Prediction {
    /// Number of predictions (the length of a matrix row).
    pub const COUNT: usize = 5;

    /// Every prediction, in column order.
    pub const ALL: [Prediction; Prediction::COUNT] = [
        Prediction::Admitted,
        Prediction::Rejected429,
        Prediction::Rejected503,
        Prediction::ShadowLimited,
        Prediction::Exempt,
    ];

    /// Column of a matrix row.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Column header in text output.
    pub fn label(self) -> &'static str {
        match self {
            Prediction::Admitted => "admitted",
            Prediction::Rejected429 => "rejected 429",
            Prediction::Rejected503 => "rejected 503",
            Prediction::ShadowLimited => "shadow-limited",
            Prediction::Exempt => "exempt",
        }
    }
}

/// A replay in progress.
pub struct Replay {
    proxy: ReplayProxy,
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
    pub classes: [DecisionCounts; Class::COUNT],
    /// Per route index (`routes.len()` = `default`).
    pub routes: Vec<DecisionCounts>,
    /// Per limit: forwarded requests it applied to and did not object to, rejections it
    /// caused, and requests it would have rejected in shadow mode.
    pub limits: Vec<DecisionCounts>,
    /// Requests for exempt paths (no class, never limited by a class limit).
    pub exempt: u64,
    /// Of those, rejected by the exempt paths' own limit (`exempt_limit`).
    pub exempt_rejected: u64,
    /// Actual status (rows, by [`StatusBucket`]) x predicted decision (columns, by
    /// [`Prediction`]).
    pub matrix: [[u64; Prediction::COUNT]; StatusBucket::COUNT],
    /// Clients by rejections.
    pub limited_clients: Heavy<Client, Option<Class>>,
    /// Verifier answers given, by bot and verdict.
    pub verdicts: BTreeMap<(String, OfflineVerdict), u64>,
    /// Upstream 429/503 the response path would have normalised.
    pub normalised: u64,
    /// Requests with no client address in the log.
    pub no_client: u64,
    /// Records that do not say whether they came over TLS (no browser-check inputs).
    pub no_signals: u64,
    /// Requests whose log carries a JA4 or an ASN the configuration does not read
    /// (`client_signals.ja4_header` / `asn_header` unset).
    pub signals_not_configured: u64,
    /// Requests still waiting for a verdict after every callout was answered (should be 0).
    pub unresolved: u64,
    /// Records replayed.
    pub requests: u64,
    /// The configuration bounds requests in flight (some limit's `max_in_flight` or
    /// `cost.max_in_flight`): forwarded requests stay open for their logged duration.
    in_flight: bool,
    /// Streams still open: (end, ns; sequence number), soonest first.
    open: BinaryHeap<Reverse<(u64, u64)>>,
    /// The open streams' states, by sequence number.
    open_states: HashMap<u64, Rc<RefCell<RequestState>>>,
    /// Next sequence number.
    seq: u64,
    /// Forwarded requests without a duration in the log (ended at once), counted only when
    /// the configuration bounds requests in flight.
    pub without_duration: u64,
}

impl Replay {
    /// A replay of `cfg` at `speed` (log seconds per replayed second, >= 1 compresses).
    pub fn new(mut cfg: Config, speed: f64, offline: Option<Offline>) -> Replay {
        let shedding = cfg.shedding.enabled;
        cfg.ratelimit_headers = true;
        cfg.shedding.enabled = false;
        let fleet = cfg.fleet.enabled;
        cfg.fleet.enabled = false;
        // The exempt paths' own limit is the last row of the per-limit table.
        let limit_index = replayed_limits(&cfg)
            .enumerate()
            .map(|(i, l)| (l.name.clone(), i))
            .collect();
        let in_flight = cfg
            .limits
            .iter()
            .any(|l| l.max_in_flight.is_some() || l.cost.is_some());
        let routes = vec![DecisionCounts::default(); cfg.routes.len() + 1];
        let limits = vec![DecisionCounts::default(); replayed_limits(&cfg).count()];
        let proxy = ReplayProxy::new(cfg);
        Replay {
            proxy,
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
            exempt_rejected: 0,
            matrix: [[0; Prediction::COUNT]; StatusBucket::COUNT],
            limited_clients: Heavy::new(crate::report::TALKER_CAPACITY),
            verdicts: BTreeMap::new(),
            normalised: 0,
            no_client: 0,
            no_signals: 0,
            signals_not_configured: 0,
            unresolved: 0,
            requests: 0,
            in_flight,
            open: BinaryHeap::new(),
            open_states: HashMap::new(),
            seq: 0,
            without_duration: 0,
        }
    }

    /// Ends every open stream whose end is at or before `now` (ns), each at its own end, in
    /// the order they end.
    fn end_streams_until(&mut self, now: u64) {
        while let Some(Reverse((end, seq))) = self.open.peek().copied() {
            if end > now {
                break;
            }
            self.open.pop();
            if let Some(state) = self.open_states.remove(&seq) {
                self.proxy.host.now_ns = end;
                self.proxy.end_stream(&state);
            }
        }
    }

    /// A forwarded request's stream, open at `now` (ns): ended at once, or, when the
    /// configuration bounds requests in flight and the log gives its duration, kept open
    /// until `now + duration / speed`.
    fn keep_open(&mut self, state: Rc<RefCell<RequestState>>, now: u64, duration_ms: Option<u32>) {
        match (self.in_flight, duration_ms) {
            (true, Some(ms)) => {
                let end = now.saturating_add((f64::from(ms) * 1e6 / self.speed) as u64);
                self.seq += 1;
                self.open.push(Reverse((end, self.seq)));
                self.open_states.insert(self.seq, state);
            }
            (in_flight, _) => {
                if in_flight {
                    self.without_duration += 1;
                }
                self.proxy.end_stream(&state);
            }
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
        self.end_streams_until(now);
        self.proxy.host.now_ns = now;
        // Envoy's root tick keeps the worker's last clock reading within one tick of the
        // wall clock (core/src/clock.rs); the replay has no ticks, so each record does.
        self.proxy.worker.clock.observe(now);
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
                let h = fnv1a(FNV_OFFSET_BASIS, c);
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
        self.no_signals += u64::from(r.signals.tls.is_none());
        let signals = &self.proxy.worker.cfg.client_signals;
        let logged = |v: Option<Option<&[u8]>>| matches!(v, Some(Some(_)));
        self.signals_not_configured += u64::from(
            (logged(r.signals.ja4) && signals.ja4_header.is_none())
                || (logged(r.signals.asn) && signals.asn_header.is_none()),
        );
        let req = Request {
            path: r.path,
            method: r.method,
            ua: r.ua,
            xff: r.xff,
            downstream: (!self.downstream.is_empty()).then_some(self.downstream.as_bytes()),
            signals: r.signals,
        };
        let offline = &self.offline;
        let verdicts = &mut self.verdicts;
        let (out, open) = self.proxy.run_open(&req, r.status, &mut |path| {
            let (body, bot, v) = offline::answer(offline.as_ref(), path);
            *verdicts.entry((bot, v)).or_insert(0) += 1;
            (200, body)
        });
        if let Some(state) = open {
            self.keep_open(state, now, r.duration_ms);
        }
        if out.unresolved {
            self.unresolved += 1;
        }
        let row = StatusBucket::of(r.status);
        let route = self.config().route_of(path_only(r.path));
        let limit = out
            .policy
            .as_deref()
            .and_then(|v| crate::logfmt::limit_name(v.as_bytes()))
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| self.limit_index.get(n).copied());
        match (out.reply, out.class) {
            (Some(status), class) => {
                if let Some(class) = class {
                    if let Some(c) = self.classes.get_mut(class.index()) {
                        c.rejected += 1;
                    }
                    if let Some(c) = self.routes.get_mut(route) {
                        c.rejected += 1;
                    }
                } else {
                    // An exempt path over `exempt_limit`: no class, as in Envoy's log.
                    self.exempt += 1;
                    self.exempt_rejected += 1;
                }
                if let Some(c) = limit.and_then(|i| self.limits.get_mut(i)) {
                    c.rejected += 1;
                }
                let col = if status == 503 {
                    Prediction::Rejected503
                } else {
                    Prediction::Rejected429
                };
                self.bump(row, col);
                self.limited_clients
                    .add(&Client::from_log(r.client), |c| *c = class);
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
                    self.bump(row, Prediction::ShadowLimited);
                    self.limited_clients
                        .add(&Client::from_log(r.client), |c| *c = Some(class));
                } else {
                    self.bump(row, Prediction::Admitted);
                }
                if out.normalised {
                    self.normalised += 1;
                }
            }
            (None, None) => {
                self.exempt += 1;
                // Forwarded under the exempt paths' own limit, when one is configured.
                let exempt_limit = self.proxy.worker.cfg.limits.len();
                if let Some(c) = self
                    .limits
                    .get_mut(exempt_limit)
                    .filter(|_| self.proxy.worker.cfg.exempt_limit.is_some())
                {
                    c.admitted += 1;
                }
                self.bump(row, Prediction::Exempt);
            }
        }
    }

    fn bump(&mut self, actual: StatusBucket, predicted: Prediction) {
        let cell = self
            .matrix
            .get_mut(actual.index())
            .and_then(|r| r.get_mut(predicted.index()));
        if let Some(c) = cell {
            *c += 1;
        }
    }
}

/// The limits a replay tallies, in the per-limit table's order: `limits`, then the exempt
/// paths' own limit (`exempt_limit`) when it is enabled.
pub(crate) fn replayed_limits(cfg: &Config) -> impl Iterator<Item = &Limit> {
    cfg.limits
        .iter()
        .chain(cfg.exempt_limit.iter().map(|e| &e.limit))
}
