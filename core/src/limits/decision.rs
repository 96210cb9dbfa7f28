//! The limit decision for one request ([`decide`]): which limits match its class and
//! route, which keys each charges (client address, global, or each distinct value of a key
//! header, [`key_values`]), and what is given back when one rejects. The buckets, their
//! keys and the store they live in are the [`Limiter`]'s (`limiter.rs`).

use crate::clock::{At, DecisionEnv};
use crate::config::{Config, ExemptLimit, KeyKind, Limit, Mode};
use crate::identity::class::Class;
use crate::identity::client_ip;
use crate::limits::bucket_key::{key_values, KeyPart, MAX_KEY_VALUES};
use crate::limits::escalation::Visit;
use crate::limits::limiter::{
    Charge, Charged, Decision, KeyRules, LimitResult, Limiter, OverLimit, Place, Placed,
    RequestKeys, Reservation, StoreEvents,
};
use crate::response::rejection;
use crate::store::SharedData;
use std::net::IpAddr;

/// Decides a request of class `class` at `now_ns`: charges every limit matching its class
/// and route, in configuration order (a cost-based limit reserves `cost.reserve` tokens,
/// any other takes one).
///
/// - An enforced limit that is empty rejects the request: the tokens already taken are given
///   back (a rejected request consumes nothing) and the decision is `Limited`.
/// - A limit in shadow mode (`limits[].mode`, or the global `mode`) that is empty does not
///   reject: the request is counted `ShadowLimited`, what it took from shadow limits is given
///   back (as enforcing them would), the other shadow limits are skipped, and the enforced
///   limits still charge it.
/// - A key header naming more than [`MAX_KEY_VALUES`] values makes the request malformed:
///   under an enforced limit `Malformed`, with the same refund; under a shadow limit
///   `ShadowMalformed`, treated as a shadow limit that is empty (forwarded, and the enforced
///   limits still charge it).
///
/// Keys of enforced `client_ip` limits remember the Retry-After their client (the address
/// and `class`) was given (compliance and escalation, [`crate::limits::escalation`]). `random` feeds the Retry-After jitter; it is
/// called only on a rejection.
pub fn decide(
    cfg: &Config,
    limiter: &mut Limiter,
    store: &dyn SharedData,
    req: &RequestKeys<'_>,
    class: Class,
    now_ns: u64,
    random: &mut dyn FnMut() -> u32,
) -> LimitResult {
    decide_in(cfg, limiter, &mut At { store, now_ns }, req, class, random)
}

/// [`decide`] with its shared data and time from `env`: the exact time is asked for only
/// when a charge touches shared state; a leased token is spent by the worker's last clock
/// reading ([`crate::clock`]), so a request every limit of which a lease serves reads no
/// clock.
pub fn decide_in(
    cfg: &Config,
    limiter: &mut Limiter,
    env: &mut dyn DecisionEnv,
    req: &RequestKeys<'_>,
    class: Class,
    random: &mut dyn FnMut() -> u32,
) -> LimitResult {
    let route = req.route;
    let without_escalation;
    let policy = if req.verified_claim {
        // A verified crawler never escalates (a penalty would shut it out for up to max_s);
        // copied only for such a request, the rest read the configuration's own.
        let mut p = *cfg.policy(class);
        p.escalation.enabled = false;
        without_escalation = p;
        &without_escalation
    } else {
        cfg.policy(class)
    };
    let mut events = StoreEvents::default();
    let mut charged = std::mem::take(&mut limiter.charged);
    charged.clear();
    let mut decision = Decision::Allowed;
    // What the first shadow limit that would have rejected the request decided.
    let mut shadow: Option<Decision> = None;
    let mut visit = Visit::Unremarkable;
    let mut escalated = false;
    'limits: for (i, limit) in cfg.limits.iter().enumerate() {
        if limit.class.is_some_and(|c| c != class) || limit.route.is_some_and(|r| r != route) {
            continue;
        }
        let is_shadow = limit.mode == Mode::Shadow;
        if is_shadow && shadow.is_some() {
            // A shadow limit already rejected: enforcing it would have stopped here.
            continue;
        }
        let Some(keys) = LimitKeys::of(limit, req, class) else {
            if is_shadow {
                // Counted, forwarded; the enforced limits still charge it.
                shadow = Some(Decision::ShadowMalformed { limit: i });
                continue 'limits;
            }
            decision = Decision::Malformed { limit: i };
            break;
        };
        if matches!(keys, LimitKeys::Skip) {
            // A `bot` key for a request naming no bot (an `asn` key, no network known):
            // nothing of this limit to charge.
            continue;
        }
        let n = limit.cost.as_ref().map_or(1, |c| c.reserve);
        // A cost-based limit's places in flight belong to the client (its address, an IPv6
        // client's /48, [`client_ip::concurrency_prefix`]), kept in the client's flight state
        // under the limit whatever the limit's key: a shared key (global, the "missing" key,
        // a User-Agent) or a named one cannot be held at its cap by someone else's stalled
        // requests, and a client cannot multiply its places with addresses of one site.
        let mut flight = None;
        if let Some(c) = &limit.cost {
            let client = req.client.map(client_ip::concurrency_prefix);
            let fk = limiter.key(&limit.name, &[KeyPart::FlightsOf(client)]);
            let now_ns = env.exact_ns();
            match limiter.take_flight(env.store(), fk, now_ns, c.max_in_flight, &mut events) {
                Ok(f) => flight = f,
                Err(()) => {
                    let over = OverLimit {
                        limit: i,
                        status: policy.reject_status,
                        retry_after_s: rejection::clamp_s(0, &policy.retry_after),
                        in_flight: Some(u16::from(c.max_in_flight)),
                    };
                    if is_shadow {
                        shadow = Some(Decision::ShadowLimited(over));
                        continue 'limits;
                    }
                    decision = Decision::Limited(over);
                    break 'limits;
                }
            }
        }
        // Compliance is about a client, an address and a class: tracked in the keys of an
        // address at the configured prefix, never in an aggregate key (a limit's own wider
        // prefix, a bot, a path: one client ignoring its Retry-After would escalate its
        // neighbours), a header key (the shared "missing" key, or a value any client can
        // name) or the one global bucket, and not in shadow mode (the client was never told
        // anything).
        let track = !is_shadow
            && matches!(limit.key, KeyKind::ClientIp)
            && limit.address_prefix.is_none()
            && req.client.is_some();
        for parts in keys.combinations() {
            let key = limiter.key(&limit.name, parts);
            // Leases: enforced limits only (a shadow limit's tokens are given back when it
            // would have rejected; not worth it), not cost-based ones (checked in charge).
            let rules = KeyRules {
                track,
                leasable: !is_shadow && limit.cost.is_none(),
                per_envoy: false,
            };
            let (c, v, at) =
                if limiter.spend_lease(key, (i, limit), n, rules.leasable, env.coarse_ns()) {
                    let leased = Charged::Allowed {
                        tokens: 1,
                        place: None,
                    };
                    (leased, Visit::Unremarkable, Some(Placed::Lease))
                } else {
                    let now_ns = env.exact_ns();
                    limiter.charge(
                        env.store(),
                        key,
                        now_ns,
                        (i, limit),
                        n,
                        (class, policy),
                        rules,
                        &mut events,
                    )
                };
            visit = match (visit, v) {
                (Visit::Ignored, _) | (_, Visit::Ignored) => Visit::Ignored,
                (Visit::Honoured, _) | (_, Visit::Honoured) => Visit::Honoured,
                _ => Visit::Unremarkable,
            };
            match c {
                Charged::Allowed { tokens, place } => {
                    if let Some(at) = at {
                        charged.push(Charge {
                            taken: Reservation {
                                limit: i,
                                reserved: tokens,
                                key,
                                at,
                                // The client's flight goes with the limit's first charge.
                                flight: flight.take(),
                            },
                            place,
                            shadow: is_shadow,
                        });
                    }
                }
                Charged::Limited {
                    retry_after_s,
                    escalated: esc,
                    in_flight,
                } => {
                    let jitter = rejection::jitter_s(&policy.retry_after, random());
                    let over = OverLimit {
                        limit: i,
                        status: policy.reject_status,
                        retry_after_s: retry_after_s.saturating_add(jitter),
                        in_flight: limit.max_in_flight.filter(|_| in_flight),
                    };
                    if let Some(f) = flight.take() {
                        let now_ns = env.exact_ns();
                        limiter.release_place(env.store(), f, now_ns);
                    }
                    if is_shadow {
                        shadow = Some(Decision::ShadowLimited(over));
                        continue 'limits;
                    }
                    escalated = esc;
                    decision = Decision::Limited(over);
                    break 'limits;
                }
            }
        }
        // A flight no reservation took (nothing charged where it can be settled).
        if let Some(f) = flight.take() {
            let now_ns = env.exact_ns();
            limiter.release_place(env.store(), f, now_ns);
        }
    }
    let (reservations, places) = settle(
        cfg,
        limiter,
        env,
        &charged,
        decision != Decision::Allowed,
        shadow.is_some(),
    );
    limiter.charged = charged;
    if let (Decision::Allowed, Some(hit)) = (decision, shadow) {
        decision = hit;
    }
    LimitResult {
        route,
        decision,
        store: events,
        visit,
        escalated,
        reservations,
        places,
    }
}

/// Decides a request for an exempt path under the exempt paths' own limit
/// (`exempt_limit`): one token from the bucket of its client prefix `client` (the configured
/// `client_ip` grouping), kept by this Envoy whole (also in fleet mode), never tracked for
/// Retry-After compliance. Returns the rejection if the bucket is empty (its Retry-After:
/// the bucket's wait clamped to the limit's range, plus jitter from `random`; the caller
/// applies the limit's mode) and the store trouble met.
pub fn decide_exempt(
    ex: &ExemptLimit,
    limiter: &mut Limiter,
    store: &dyn SharedData,
    client: Option<IpAddr>,
    now_ns: u64,
    random: &mut dyn FnMut() -> u32,
) -> (Option<OverLimit>, StoreEvents) {
    let mut events = StoreEvents::default();
    let key = limiter.key(
        &ex.limit.name,
        &[client.map_or(KeyPart::UnknownIp, KeyPart::Ip)],
    );
    let rules = KeyRules {
        track: false,
        leasable: ex.limit.mode == Mode::Enforce,
        per_envoy: true,
    };
    // Its own lease index, past the configured limits'.
    let idx = usize::MAX;
    let (c, _, _) = limiter.charge(
        store,
        key,
        now_ns,
        (idx, &ex.limit),
        1,
        (Class::Human, &ex.policy),
        rules,
        &mut events,
    );
    let over = match c {
        Charged::Allowed { .. } => None,
        Charged::Limited { retry_after_s, .. } => Some(OverLimit {
            limit: idx,
            status: ex.policy.reject_status,
            retry_after_s: retry_after_s
                .saturating_add(rejection::jitter_s(&ex.policy.retry_after, random())),
            in_flight: None,
        }),
    };
    (over, events)
}

/// After the limits: gives back what a request must not keep and returns the cost-based
/// reservations its response settles and the places in flight its stream's end gives back.
/// Everything goes back when it was `rejected`; what shadow limits took when one of them
/// would have rejected (`shadow_hit`: enforcing it would have stopped the request there);
/// the rest is recorded in the fleet ledger (tokens of a bucket; places are per Envoy) and
/// its places are held by this worker.
fn settle(
    cfg: &Config,
    limiter: &mut Limiter,
    env: &mut dyn DecisionEnv,
    charged: &[Charge],
    rejected: bool,
    shadow_hit: bool,
) -> (Vec<Reservation>, Vec<Place>) {
    let mut reservations = Vec::new();
    let mut places = Vec::new();
    for &Charge {
        taken: r,
        place,
        shadow: in_shadow,
    } in charged
    {
        let Some(limit) = cfg.limits.get(r.limit) else {
            continue;
        };
        let rate = limit.bucket.map(|b| limiter.local_rate(b.rate));
        if rejected || (in_shadow && shadow_hit) {
            // A leased token goes back into its lease: no time, no shared data.
            let now_ns = if r.at == Placed::Lease {
                env.coarse_ns()
            } else {
                env.exact_ns()
            };
            let store = env.store();
            match (rate, limit.cost.is_some()) {
                (Some(rate), true) => {
                    // Everything back, and the reservation's flight ends unlearned.
                    limiter.end_flight(store, &r, rate, 0, None, now_ns);
                    if let Some(t) = place {
                        limiter.give_back_place(store, r.key, r.at, t.epoch_s, now_ns);
                    }
                }
                _ => limiter.refund(
                    store,
                    (r.key, r.limit),
                    r.at,
                    rate,
                    r.reserved,
                    place.map(|t| t.epoch_s),
                    now_ns,
                ),
            }
            continue;
        }
        if let (Some(f), Some(_)) = (limiter.fleet.as_mut(), limit.bucket) {
            f.ledger.record(r.key, r.limit, u64::from(r.reserved));
        }
        if limit.cost.is_some() {
            reservations.push(r);
        }
        if let (Some(t), Some(max)) = (place, limit.max_in_flight) {
            if let Some(p) = limiter.hold_place(r.key, r.at, t, max) {
                places.push(p);
            }
        }
    }
    (reservations, places)
}

/// The bucket keys one limit charges for a request: one for a one-part key that is not a
/// header (no allocation), one per distinct value of a key header ([`key_values`]; a
/// request without the header has the one "missing" key), and for a compound key one per
/// combination of its parts' values; each key is a run of [`KeyPart`]s.
enum LimitKeys<'a> {
    /// Nothing to charge: a `bot` part, and the request names no bot (or an `asn` part, and
    /// its network is not known).
    Skip,
    One(KeyPart<'a>),
    /// `width` parts per key, keys one after the other.
    Many {
        width: usize,
        parts: Vec<KeyPart<'a>>,
    },
}

impl<'a> LimitKeys<'a> {
    /// The keys of `limit` for `req` of class `class`; `None` when its parts name more than
    /// [`MAX_KEY_VALUES`] distinct values or combinations (the request is malformed).
    fn of(limit: &'a Limit, req: &'a RequestKeys<'_>, class: Class) -> Option<LimitKeys<'a>> {
        // In a limit of every class, a key anyone can copy carries the class too.
        let with_class = limit.class.is_none() && limit.key.keyed_by_claim();
        if let (false, [part]) = (with_class, limit.key.parts()) {
            if part.header_name().is_none() {
                return Some(match Self::single(part, limit, req) {
                    Some(k) => LimitKeys::One(k),
                    None => LimitKeys::Skip,
                });
            }
        }
        let mut width = 0;
        let mut parts: Vec<KeyPart<'a>> = Vec::new();
        for kind in limit.key.parts() {
            let values: Vec<KeyPart<'a>> = match kind.header_name() {
                Some(name) => {
                    let values = key_values(
                        req.header_lines(name),
                        crate::config::key_header_is_list(name),
                    );
                    if values.len() > MAX_KEY_VALUES {
                        return None;
                    }
                    if values.is_empty() {
                        vec![KeyPart::Header(None)]
                    } else {
                        values
                            .into_iter()
                            .map(|v| KeyPart::Header(Some(v)))
                            .collect()
                    }
                }
                None => match Self::single(kind, limit, req) {
                    Some(k) => vec![k],
                    None => return Some(LimitKeys::Skip),
                },
            };
            parts = cross(parts, width, &values)?;
            width += 1;
        }
        if with_class {
            parts = cross(parts, width, &[KeyPart::Class(class)])?;
            width += 1;
        }
        Some(LimitKeys::Many { width, parts })
    }

    /// The one value of a part that is not a header; `None` for a `bot` part of a request
    /// naming no bot, or an `asn` part of a request whose network is not known.
    fn single(kind: &KeyKind, limit: &Limit, req: &RequestKeys<'a>) -> Option<KeyPart<'a>> {
        Some(match kind {
            KeyKind::Global => KeyPart::Global,
            KeyKind::ClientIp => {
                let ip = match limit.address_prefix {
                    Some(p) => req.client_ip.map(|ip| client_ip::masked_to(ip, p)),
                    None => req.client,
                };
                ip.map_or(KeyPart::UnknownIp, KeyPart::Ip)
            }
            KeyKind::Bot => KeyPart::Bot(req.bot?),
            KeyKind::Path => KeyPart::Path(req.path),
            KeyKind::Asn => KeyPart::Asn(req.asn?),
            // Headers have many values and compound keys are flattened by `of`: never here.
            KeyKind::Header(_) | KeyKind::Compound(_) => KeyPart::Global,
        })
    }

    /// Each key, as its run of parts.
    fn combinations(&self) -> std::slice::Chunks<'_, KeyPart<'a>> {
        match self {
            LimitKeys::Skip => [].chunks(1),
            LimitKeys::One(k) => std::slice::from_ref(k).chunks(1),
            LimitKeys::Many { width, parts } => parts.chunks((*width).max(1)),
        }
    }
}

/// Every key of `keys` (runs of `width` parts; none yet when `width` is 0) extended by each
/// of `values`, in order; `None` past [`MAX_KEY_VALUES`] keys.
fn cross<'a>(
    keys: Vec<KeyPart<'a>>,
    width: usize,
    values: &[KeyPart<'a>],
) -> Option<Vec<KeyPart<'a>>> {
    if width == 0 {
        return Some(values.to_vec());
    }
    let count = (keys.len() / width).saturating_mul(values.len());
    if count > MAX_KEY_VALUES {
        return None;
    }
    let mut out = Vec::with_capacity(count * (width + 1));
    for key in keys.chunks(width) {
        for v in values {
            out.extend_from_slice(key);
            out.push(*v);
        }
    }
    Some(out)
}
