//! The buckets a limit decision ([`crate::limits::decision`]) charges: key fingerprints,
//! one charge per key, refunds, lease give-backs, and the decision's result types.
//!
//! Buckets live in the shared slot table ([`SharedSlots`]); when it cannot serve a key, the
//! per-worker fallback ([`LocalStore`]) decides with the same limit. Both are reached through
//! the one [`StateStore`] seam, with the bucket math ([`bucket::take`]) passed in.

use crate::config::Config;
use crate::config::{ClassPolicy, Limit};
use crate::fleet::FleetBuckets;
use crate::identity::class::Class;
use crate::limits::bucket::{self, Take};
use crate::limits::bucket_key::KeyPart;
use crate::limits::escalation::Visit;
use crate::limits::lease::{self, Lease, Leases};
use crate::response::rejection;
use crate::store::local_store::{LocalPlace, LocalStore};
use crate::store::slot_table::{SharedSlots, SlotRef, SlotTable, CANDIDATES};
use crate::store::{SharedData, StateKey, StateStore, PUBLISHED_HASH_SEED};
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;

pub use key_state::KeyState;
pub use outcome::{Decision, LimitResult, OverLimit, StoreEvents};
pub use places::Place;
pub use reservation::Reservation;

mod fleet_fold;
mod key_state;
mod outcome;
mod places;
mod reservation;

/// Shared-data key prefix of bucket slots.
pub const BUCKET_PREFIX: &str = "cg:b:";

pub use crate::limits::bucket_key::RequestKeys;

/// Where a charged token was taken, for a refund or a settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placed {
    Shared(SlotRef),
    Local(LocalPlace),
    /// Spent from this worker's lease of the key ([`crate::limits::lease`]).
    Lease,
}

/// A place in flight just taken ([`crate::limits::in_flight`]): the epoch it counts in,
/// and the key's places in flight with it (what this worker last saw of the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    pub(crate) epoch_s: u32,
    pub(crate) in_flight: u32,
}

impl Taken {
    /// Takes a place of `places` at `now_ns`.
    pub(crate) fn of(places: &mut crate::limits::in_flight::InFlight, now_ns: u64) -> Taken {
        let epoch_s = places.take(now_ns);
        Taken {
            epoch_s,
            in_flight: places.count_at(now_ns),
        }
    }
}

/// What charging one key did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Charged {
    /// `tokens` taken (a cost-based key's reservation may be more than asked: its last
    /// cost, [`crate::limits::cost`]; 0 for a limit without a bucket); `place`: the epoch a
    /// place in flight was taken in, if one was ([`crate::limits::in_flight`]; also
    /// [`Limiter::take_flight`]'s answer, which shares this type so that both share the
    /// store code).
    Allowed { tokens: u32, place: Option<Taken> },
    /// Over the limit: the Retry-After to send before jitter (clamped, maybe escalated);
    /// `in_flight`: its places in flight are all taken (the bucket was not asked).
    Limited {
        retry_after_s: u32,
        escalated: bool,
        in_flight: bool,
    },
}

/// Per-worker limiter state: the bucket slot table, the per-worker fallback, the keyed
/// hasher, and in fleet mode the worker's unsent consumption and view of the fleet.
#[derive(Debug)]
pub struct Limiter {
    buckets: SlotTable<KeyState>,
    fallback: LocalStore<KeyState>,
    hasher: ahash::RandomState,
    pub(crate) fleet: Option<FleetBuckets>,
    /// What [`decide`] charged for the request being decided, kept between requests so a
    /// warm worker allocates nothing for it.
    pub(crate) charged: Vec<Charge>,
    /// Tokens this worker holds of buckets far from empty ([`crate::limits::lease`]).
    leases: Leases,
    /// Places in flight this worker's live requests hold ([`places`]).
    places: places::HeldPlaces,
}

/// One charged key: what was taken where (a [`Reservation`], which a cost-based limit's
/// forwarded request settles; any other's is only given back on a rejection), the epoch of
/// the place in flight it took (a concurrency limit's), and whether its limit is in shadow
/// mode.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Charge {
    pub(crate) taken: Reservation,
    pub(crate) place: Option<Taken>,
    pub(crate) shadow: bool,
}

/// How [`Limiter::charge`] treats a key, from what the key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyRules {
    /// Retry-After compliance is checked and remembered (an enforced limit keyed by a
    /// client address).
    pub(crate) track: bool,
    /// The token may come from this worker's lease of the key ([`crate::limits::lease`]).
    pub(crate) leasable: bool,
    /// The limit is this Envoy's alone, whole, also in fleet mode (the exempt paths' own
    /// limit): never a share of a fleet-wide one.
    pub(crate) per_envoy: bool,
}

impl Limiter {
    /// Builds the limiter for `cfg.store`.
    pub fn new(cfg: &Config) -> Limiter {
        let s = cfg.store.hash_seed.unwrap_or(PUBLISHED_HASH_SEED);
        Limiter {
            buckets: SlotTable::new(BUCKET_PREFIX, cfg.store.slots, cfg.store.cas_retries),
            fallback: LocalStore::new(cfg.store.fallback_buckets as usize),
            hasher: ahash::RandomState::with_seeds(
                s,
                s ^ 0x243f_6a88_85a3_08d3,
                s ^ 0x1319_8a2e_0370_7344,
                s ^ 0xa409_3822_299f_31d0,
            ),
            fleet: FleetBuckets::new(cfg),
            charged: Vec::new(),
            leases: Leases::default(),
            places: places::HeldPlaces::default(),
        }
    }

    /// The candidate slots of the bucket of client prefix `client` under the limit named
    /// `limit_name` (a `client_ip` limit): where its state may live in the slot table. What
    /// an attacker who knows `store.hash_seed` computes to plan collisions; tests use it to
    /// show that a secret seed defeats that.
    pub fn client_slots(&self, limit_name: &str, client: IpAddr) -> [usize; CANDIDATES] {
        self.buckets
            .key_candidates(self.key(limit_name, &[KeyPart::Ip(client)]).fp)
    }

    /// The bucket slot table (for pre-creating slots at start).
    pub fn table(&self) -> &SlotTable<KeyState> {
        &self.buckets
    }

    /// The per-worker fallback.
    pub fn fallback(&self) -> &LocalStore<KeyState> {
        &self.fallback
    }

    /// Fingerprint of a verification claim (full client IP, bot id) for the verdict cache.
    pub fn claim_fingerprint(&self, ip: IpAddr, bot_id: &str) -> u64 {
        let mut h = self.hasher.build_hasher();
        "claim".hash(&mut h);
        ip.hash(&mut h);
        bot_id.hash(&mut h);
        h.finish()
    }

    /// Fingerprint of a client prefix (an address already masked to the configured prefix
    /// length) for the per-prefix spoofed count.
    pub fn prefix_fingerprint(&self, prefix: IpAddr) -> u64 {
        let mut h = self.hasher.build_hasher();
        "prefix".hash(&mut h);
        prefix.hash(&mut h);
        h.finish()
    }

    /// The state key of one bucket: its fingerprint, and what it shares in the per-worker
    /// fallback when it finds no room there: a client address's group
    /// ([`crate::identity::client_ip::group`]) under the limit, then the limit's overflow value.
    pub(crate) fn key(&self, limit_name: &str, parts: &[KeyPart<'_>]) -> StateKey {
        let mut h = self.hasher.build_hasher();
        // The slot count is part of a bucket's identity: with another `store.slots` every
        // key gets a new fingerprint, so every bucket starts full again, as the load log
        // says (`store::record_shape`); otherwise a key whose slot happened not to move
        // would keep its old state and the others would not.
        self.buckets.len().hash(&mut h);
        limit_name.hash(&mut h);
        let overflow = h.clone();
        // Part by part, no length: a one-part key hashes as it always has (its buckets
        // survive an upgrade); a limit's parts are the same kinds in the same order for
        // every request, so no two combinations hash alike by shape.
        for part in parts {
            part.hash(&mut h);
        }
        let mut o = overflow;
        "overflow".hash(&mut o);
        let overflow_fp = o.finish();
        StateKey {
            fp: h.finish(),
            group_fp: parts.iter().find_map(|p| match p {
                KeyPart::Ip(ip) => Some(crate::identity::client_ip::group_fp(*ip, overflow_fp)),
                _ => None,
            }),
            overflow_fp,
        }
    }

    /// Changes `key`'s state with `f`: in the shared table, else (any [`crate::store::StoreFault`],
    /// counted in `events`) in the per-worker fallback, which never fails.
    fn update<T>(
        &mut self,
        store: &dyn SharedData,
        key: StateKey,
        now_ns: u64,
        events: &mut StoreEvents,
        // dyn: one copy of the store code per result type, not one per caller's closure
        // (the module's size; a charge and a flight share one).
        f: &mut dyn FnMut(Option<KeyState>) -> (T, Option<KeyState>),
    ) -> Option<(T, Placed)> {
        let mut f = f;
        let mut shared = SharedSlots {
            table: &self.buckets,
            store,
        };
        match shared.measure_and_replace(key, now_ns, &mut f) {
            Ok((t, at)) => Some((t, Placed::Shared(at))),
            Err(fault) => {
                events.count(fault);
                self.fallback
                    .measure_and_replace(key, now_ns, &mut f)
                    .ok()
                    .map(|(t, at)| (t, Placed::Local(at)))
            }
        }
    }

    /// Whether a charge of `n` tokens under `limit` may be served by (and take) a lease
    /// ([`crate::limits::lease`]): one token, a bucket, no places in flight, outside fleet
    /// mode (and the caller's `KeyRules::leasable`).
    fn may_lease(&self, limit: &Limit, n: u32) -> bool {
        n == 1 && self.fleet.is_none() && limit.max_in_flight.is_none() && limit.bucket.is_some()
    }

    /// Spends one leased token of `key` under limit `limit_idx` for a charge of `n` tokens
    /// that may be served by one (`leasable`: the caller's `KeyRules::leasable`): true if
    /// there was one at `now_ns` (the worker's last clock reading is enough: the tick gives
    /// leases back).
    pub(crate) fn spend_lease(
        &mut self,
        key: StateKey,
        (limit_idx, limit): (usize, &Limit),
        n: u32,
        leasable: bool,
        now_ns: u64,
    ) -> bool {
        leasable && self.may_lease(limit, n) && self.leases.spend(key, limit_idx, now_ns)
    }

    /// Takes `n` tokens from `key`'s bucket under `limit`, for a request of `class` with
    /// `policy`, and with `limit.max_in_flight` one of the key's places in flight, in the
    /// same write ([`crate::limits::in_flight`]): a key whose places are all taken is
    /// refused before its bucket is asked (Retry-After the class's `retry_after.min_s`; not
    /// remembered as something the client was told). With `rules.track` (an enforced limit
    /// keyed by a client address), the client's Retry-After compliance is checked and
    /// remembered, and a client serving a penalty is rejected without taking tokens
    /// ([`crate::limits::escalation`]: the client is the address and the class).
    ///
    /// With `rules.leasable` (see [`crate::limits::lease`]) the token may come from this worker's
    /// lease of the key (no shared-data call), and a charge that leaves the bucket far from
    /// empty takes a lease of a few more tokens in the same write. A limit with places in
    /// flight is never leased: every admission must count in the shared slot.
    ///
    /// A cost-based limit's places in flight per client are taken before,
    /// [`Limiter::take_flight`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn charge(
        &mut self,
        store: &dyn SharedData,
        key: StateKey,
        now_ns: u64,
        (limit_idx, limit): (usize, &Limit),
        n: u32,
        (class, policy): (Class, &ClassPolicy),
        rules: KeyRules,
        events: &mut StoreEvents,
    ) -> (Charged, Visit, Option<Placed>) {
        let KeyRules {
            track,
            leasable,
            per_envoy,
        } = rules;
        let rate = limit.bucket.map(|b| {
            if per_envoy {
                b.rate
            } else {
                self.local_rate(b.rate)
            }
        });
        let max_in_flight = limit.max_in_flight;
        let leasable = leasable && self.may_lease(limit, n);
        if leasable && self.leases.spend(key, limit_idx, now_ns) {
            return (
                Charged::Allowed {
                    tokens: 1,
                    place: None,
                },
                Visit::Unremarkable,
                Some(Placed::Lease),
            );
        }
        let ra = &policy.retry_after;
        let esc = &policy.escalation;
        let mut leased = 0;
        let result = self.update(store, key, now_ns, events, &mut |s| {
            leased = 0;
            let mut st = s.unwrap_or_default();
            let visit = if track {
                st.compliance.visit(now_ns, class, esc)
            } else {
                Visit::Unremarkable
            };
            let penalised = track && st.compliance.penalises(now_ns, class, esc);
            if !penalised && max_in_flight.is_some_and(|m| !st.places.has_room(now_ns, m)) {
                // Every place taken: a place frees when one of the key's requests ends,
                // which nobody can tell, so the class's shortest wait. Only the visit is
                // remembered (a refusal at the cap tells the client nothing to ignore).
                let full = Charged::Limited {
                    retry_after_s: rejection::clamp_s(0, ra),
                    escalated: false,
                    in_flight: true,
                };
                return ((full, visit), track.then_some(st));
            }
            let wait_ns = match rate {
                // Serving a penalty: rejected without consuming tokens, at the class's base
                // wait (the step sets the penalty, not what is left of the last one).
                _ if penalised => 0,
                None => {
                    let place = max_in_flight.map(|_| Taken::of(&mut st.places, now_ns));
                    let allowed = Charged::Allowed { tokens: 0, place };
                    return ((allowed, visit), Some(st));
                }
                Some(rate) => {
                    // A cost-based key reserves what it last cost.
                    let n = match &limit.cost {
                        Some(_) => st.cost.reservation(n, rate.burst),
                        None => n,
                    };
                    match bucket::take_n(Some(st.bucket), now_ns, rate, n) {
                        Take::Allowed { state, remaining } => {
                            st.bucket = state;
                            // A lease only for a key that remembers nothing (spending it
                            // skips the compliance visit, a no-op for such a key).
                            let size = lease::lease_size(rate.burst, remaining);
                            if leasable && size > 0 && st.compliance.is_idle(now_ns) {
                                if let Take::Allowed { state, .. } =
                                    bucket::take_n(Some(st.bucket), now_ns, rate, size)
                                {
                                    st.bucket = state;
                                    leased = size;
                                }
                            }
                            let place = max_in_flight.map(|_| Taken::of(&mut st.places, now_ns));
                            let allowed = Charged::Allowed { tokens: n, place };
                            return ((allowed, visit), Some(st));
                        }
                        Take::Limited { wait_ns } => wait_ns,
                    }
                }
            };
            let base_s = rejection::clamp_s(wait_ns.div_ceil(bucket::NS_PER_S), ra);
            if !track {
                let limited = Charged::Limited {
                    retry_after_s: base_s,
                    escalated: false,
                    in_flight: false,
                };
                return ((limited, visit), None);
            }
            let (retry_after_s, escalated) = st.compliance.reject(now_ns, class, base_s, policy);
            let limited = Charged::Limited {
                retry_after_s,
                escalated,
                in_flight: false,
            };
            ((limited, visit), Some(st))
        });
        if let (Some(((Charged::Allowed { .. }, _), Placed::Shared(at))), true, Some(rate)) =
            (&result, leased > 0, rate)
        {
            let back = self.leases.hold(Lease {
                key,
                limit: limit_idx,
                at: *at,
                tokens: leased,
                rate,
                taken_ns: now_ns,
            });
            if let Some(l) = back {
                self.give_back(store, l);
            }
        }
        match result {
            Some(((c @ Charged::Allowed { .. }, visit), at)) => (c, visit, Some(at)),
            Some(((c, visit), _)) => (c, visit, None),
            // Unreachable (the fallback never fails); strict if it ever did.
            None => (
                Charged::Limited {
                    retry_after_s: rejection::clamp_s(0, ra),
                    escalated: false,
                    in_flight: false,
                },
                Visit::Unremarkable,
                None,
            ),
        }
    }

    /// Gives back what a charge took, where it took it, when a later limit rejected the
    /// request: `n` tokens (`rate`: the bucket's, `None` for a limit without one) and the
    /// place in flight taken in epoch `place` (best effort: a lost give-back only errs on the
    /// strict side).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn refund(
        &mut self,
        store: &dyn SharedData,
        (key, limit_idx): (StateKey, usize),
        at: Placed,
        rate: Option<bucket::Rate>,
        n: u32,
        place: Option<u32>,
        now_ns: u64,
    ) {
        if at == Placed::Lease {
            // Back into the lease; if it was given back meanwhile, the token is lost (strict).
            self.leases.unspend(key, limit_idx);
            return;
        }
        self.change_at(store, key, at, &mut |s| {
            let mut st = s;
            if let (Some(rate), true) = (rate, n > 0) {
                st.bucket = bucket::refund_n(s.bucket, rate, n);
            }
            if let Some(epoch_s) = place {
                st.places.release(now_ns, epoch_s, 1);
            }
            st
        });
    }

    /// Changes `key`'s state with `f` where a charge put it, only if the slot is still
    /// `key`'s (best effort: every caller gives something back or ends a flight, and a lost
    /// change errs on the strict side or is forgotten with its epoch); true when it was
    /// changed. A lease holds no state: nothing to change. `dyn`: one copy of the store code
    /// for every caller.
    pub(crate) fn change_at(
        &mut self,
        store: &dyn SharedData,
        key: StateKey,
        at: Placed,
        f: &mut dyn FnMut(KeyState) -> KeyState,
    ) -> bool {
        match at {
            Placed::Shared(at) => SharedSlots {
                table: &self.buckets,
                store,
            }
            .replace_at(key, at, f),
            Placed::Local(at) => self.fallback.replace_at(key, at, f),
            Placed::Lease => Ok(()),
        }
        .is_ok()
    }

    /// Gives a lease's unspent tokens back to its bucket (best effort: a lost give-back only
    /// errs on the strict side, and a bucket whose slot was taken over was full again).
    fn give_back(&mut self, store: &dyn SharedData, l: Lease) {
        self.change_at(store, l.key, Placed::Shared(l.at), &mut |s| KeyState {
            bucket: bucket::refund_n(s.bucket, l.rate, l.tokens),
            ..s
        });
    }

    /// Gives every lease back to its bucket (on the root tick, and when the worker goes
    /// away): unspent leased tokens are missing from the shared bucket at most one tick.
    pub fn return_leases(&mut self, store: &dyn SharedData) {
        for l in self.leases.take_all() {
            self.give_back(store, l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use crate::config::{KeyKind, Mode};
    use crate::identity::client_ip;
    use crate::limits::bucket::NS_PER_S;
    use crate::limits::bucket_key::{key_values, MAX_KEY_VALUES};
    use crate::limits::decision::decide;
    use crate::store::mem::{Fault, MemStore};

    const T0: u64 = 1_700_000_000 * NS_PER_S;

    /// A request as the limiter sees it, owning its data.
    struct TestReq {
        path: &'static str,
        remote: String,
        headers: Vec<(&'static str, Vec<Vec<u8>>)>,
        /// The bot id its User-Agent names.
        bot: Option<&'static str>,
    }

    fn req(path: &'static str, remote: &str) -> TestReq {
        TestReq {
            path,
            remote: remote.to_string(),
            headers: Vec::new(),
            bot: None,
        }
    }

    /// A request to `/` from 1.1.1.1 whose `x-api-key` header has these lines.
    fn keyed(lines: &[&[u8]]) -> TestReq {
        TestReq {
            headers: vec![("x-api-key", lines.iter().map(|l| l.to_vec()).collect())],
            ..req("/", "1.1.1.1:1")
        }
    }

    fn keys<'a>(cfg: &Config, r: &'a TestReq) -> RequestKeys<'a> {
        let path = r.path.split(['?', '#']).next().unwrap_or_default();
        let ip = client_ip::client_ip(&cfg.client_ip, Some(r.remote.as_bytes()), None);
        RequestKeys {
            route: cfg.route_of(path.as_bytes()),
            client: ip.map(|a| client_ip::masked(a, &cfg.client_ip)),
            client_ip: ip,
            bot: r.bot,
            path: path.as_bytes(),
            asn: None,
            key_headers: &r.headers,
            verified_claim: false,
        }
    }

    fn run(
        cfg: &Config,
        lim: &mut Limiter,
        store: &MemStore,
        r: &TestReq,
        class: Class,
    ) -> LimitResult {
        decide(cfg, lim, store, &keys(cfg, r), class, T0, &mut || 0)
    }

    fn setup(json: &str) -> (Config, Limiter, MemStore) {
        let cfg = config::parse(json.as_bytes()).expect("valid config");
        let lim = Limiter::new(&cfg);
        let store = MemStore::default();
        assert!(lim.table().precreate(&store).is_ok());
        (cfg, lim, store)
    }

    fn count_allowed(
        cfg: &Config,
        lim: &mut Limiter,
        store: &MemStore,
        r: &TestReq,
        class: Class,
        n: usize,
    ) -> usize {
        (0..n)
            .filter(|_| run(cfg, lim, store, r, class).decision == Decision::Allowed)
            .count()
    }

    const TWO_LIMITS: &str = r#"{"routes":[{"name":"api","path_prefix":"/api/"}],"limits":[
        {"name":"per_ip","class":"*","route":"*","rate_per_s":0.001,"burst":5,"key":"client_ip"},
        {"name":"api_global","class":"*","route":"api","rate_per_s":0.001,"burst":3,"key":"global"}]}"#;

    #[test]
    fn each_client_ip_has_its_own_bucket() {
        let (cfg, mut lim, store) = setup(TWO_LIMITS);
        let a = req("/", "127.0.0.2:1000");
        let b = req("/", "127.0.0.3:1000");
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 20),
            5
        );
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &b, Class::Human, 20),
            5
        );
    }

    #[test]
    fn rejected_request_consumes_no_other_bucket() {
        let (cfg, mut lim, store) = setup(TWO_LIMITS);
        // 3 API requests drain api_global; per_ip has 2 of 5 left.
        let a = req("/api/x", "127.0.0.2:1");
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 3),
            3
        );
        // 10 rejected API requests must not drain per_ip further.
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 10),
            0
        );
        let home = req("/", "127.0.0.2:1");
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &home, Class::Human, 10),
            2
        );
    }

    #[test]
    fn limited_outcome_carries_limit_status_and_retry_after() {
        let (cfg, mut lim, store) = setup(
            r#"{"classes":{"script":{"retry_after":{"min_s":2,"max_s":100,"jitter_s":0},"reject_status":503}},
                "limits":[{"name":"s","class":"script","route":"*","rate_per_s":0.1,"burst":1,"key":"client_ip"}]}"#,
        );
        let r = req("/x?q=1", "10.0.0.1:5");
        assert_eq!(
            run(&cfg, &mut lim, &store, &r, Class::Script).decision,
            Decision::Allowed
        );
        // 0.1/s: next token in exactly 10 s.
        assert_eq!(
            run(&cfg, &mut lim, &store, &r, Class::Script).decision,
            Decision::Limited(OverLimit {
                limit: 0,
                status: 503,
                retry_after_s: 10,
                in_flight: None,
            })
        );
        // Other classes do not match this limit.
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &r, Class::Human, 50),
            50
        );
    }

    #[test]
    fn shadow_mode_never_rejects_but_reports() {
        let (cfg, mut lim, store) = setup(
            r#"{"mode":"shadow","limits":[{"name":"s","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"global"}]}"#,
        );
        let r = req("/", "1.2.3.4:1");
        let v: Vec<_> = (0..4)
            .map(|_| run(&cfg, &mut lim, &store, &r, Class::Human).decision)
            .collect();
        assert_eq!(v[0], Decision::Allowed);
        assert_eq!(v[1], Decision::Allowed);
        assert!(matches!(
            v[2],
            Decision::ShadowLimited(OverLimit {
                limit: 0,
                status: 429,
                ..
            })
        ));
        assert!(matches!(v[3], Decision::ShadowLimited(_)));
    }

    #[test]
    fn header_keyed_limits_split_by_value() {
        let (cfg, mut lim, store) = setup(
            r#"{"limits":[{"name":"k","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"header:x-api-key"}]}"#,
        );
        for (r, n, want) in [
            (keyed(&[b"a"]), 5, 2),
            (keyed(&[b"b"]), 5, 2),
            (req("/", "1.1.1.1:1"), 5, 2),
            // An exhausted key listed behind a fresh one (second line, or comma list) is
            // still charged: the request is rejected and the fresh key keeps its tokens.
            (keyed(&[b"fresh", b"a"]), 3, 0),
            (keyed(&[b" fresh , , a "]), 3, 0),
            (keyed(&[b"fresh"]), 5, 2),
            // A blank header is the same key as a missing one (exhausted above).
            (keyed(&[b"  "]), 2, 0),
        ] {
            assert_eq!(
                count_allowed(&cfg, &mut lim, &store, &r, Class::Human, n),
                want,
                "{:?}",
                r.headers
            );
        }
    }

    /// `n` distinct key values `k0`..`k<n-1>`, one per line, after `first`.
    fn many_values(first: &[u8], n: usize) -> TestReq {
        let mut v: Vec<Vec<u8>> = vec![first.to_vec()];
        v.extend((0..n).map(|i| format!("k{i}").into_bytes()));
        TestReq {
            headers: vec![("x-api-key", v)],
            ..req("/", "1.1.1.1:1")
        }
    }

    #[test]
    fn more_than_max_key_values_is_malformed_and_charges_nothing() {
        const LIMITS: &str = r#""limits":[
            {"name":"ip","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"client_ip"},
            {"name":"k","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"header:x-api-key"}]"#;
        let (cfg, mut lim, store) = setup(&format!("{{{LIMITS}}}"));
        // One request with key "a": the per-IP bucket and "a" have one token left each.
        let a = many_values(b"a", 0);
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 1),
            1
        );
        // "a" + 16 fresh values = 17 distinct: malformed, whatever the buckets hold.
        let padded = many_values(b"a", MAX_KEY_VALUES);
        for _ in 0..3 {
            assert_eq!(
                run(&cfg, &mut lim, &store, &padded, Class::Human).decision,
                Decision::Malformed { limit: 1 }
            );
        }
        // The per-IP token charged before the key limit was refunded each time: one left
        // for "a" (which then has one token of its own left), none after.
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 3),
            1
        );
        // Exactly 16 distinct values ("a", "k0".."k14"): every one is charged.
        let (cfg, mut lim, store) = setup(
            r#"{"limits":[{"name":"k","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"header:x-api-key"}]}"#,
        );
        let sixteen = many_values(b"a", MAX_KEY_VALUES - 1);
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &sixteen, Class::Human, 3),
            2
        );
        let k14 = many_values(b"k14", 0);
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &k14, Class::Human, 1),
            0,
            "the last of the 16 values was charged by both requests"
        );
        let k15 = many_values(b"k15", 0);
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &k15, Class::Human, 3),
            2
        );
        // Shadow mode: counted as malformed, never rejected, nothing charged.
        let (cfg, mut lim, store) = setup(&format!("{{\"mode\":\"shadow\",{LIMITS}}}"));
        for _ in 0..3 {
            assert_eq!(
                run(&cfg, &mut lim, &store, &padded, Class::Human).decision,
                Decision::ShadowMalformed { limit: 1 }
            );
        }
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 3),
            2
        );
    }

    #[test]
    fn another_slot_count_or_seed_starts_every_bucket_full_again() {
        let doc = |slots: u32, seed: u64| {
            format!(
                r#"{{"store":{{"slots":{slots},"hash_seed":{seed}}},"limits":[{{"name":"ip","class":"*","route":"*","rate_per_s":0.001,"burst":2,"key":"client_ip"}}]}}"#
            )
        };
        let store = MemStore::default();
        let clients: Vec<String> = (1..=20).map(|i| format!("10.0.0.{i}:1")).collect();
        let run = |json: &str, n: usize| -> Vec<usize> {
            let cfg = config::parse(json.as_bytes()).expect("valid config");
            let mut lim = Limiter::new(&cfg);
            assert!(lim.table().precreate(&store).is_ok());
            clients
                .iter()
                .map(|c| count_allowed(&cfg, &mut lim, &store, &req("/", c), Class::Human, n))
                .collect()
        };
        // Same shared store throughout, as across configurations of one Envoy.
        assert_eq!(run(&doc(64, 1), 3), vec![2; 20]);
        // Same shape, new Limiter (a configuration push): every bucket is kept.
        assert_eq!(run(&doc(64, 1), 3), vec![0; 20]);
        // 64 -> 128 slots (half the keys' first slot would not move): all start full.
        assert_eq!(run(&doc(128, 1), 3), vec![2; 20]);
        assert_eq!(run(&doc(128, 2), 3), vec![2; 20]);
    }

    #[test]
    fn key_values_split_dedupe_and_trim() {
        let lines = vec![b"a, b".to_vec(), b" a ,c,,".to_vec(), b"".to_vec()];
        assert_eq!(key_values(&lines, true), vec![&b"a"[..], b"b", b"c"]);
        assert!(key_values(&[], true).is_empty());
        assert!(key_values(&[b" , ".to_vec()], true).is_empty());
        // Collection stops one past the maximum.
        let huge: Vec<u8> = (0..10_000)
            .map(|i| format!("v{i},"))
            .collect::<String>()
            .into_bytes();
        assert_eq!(key_values(&[huge], true).len(), MAX_KEY_VALUES + 1);
    }

    #[test]
    fn a_user_agent_key_is_each_whole_line() {
        // Chrome and Edge share the part before the comma in "(KHTML, like Gecko)": split
        // there, they would share a bucket.
        let chrome = b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like \
                       Gecko) Chrome/120.0.0.0 Safari/537.36";
        let lines = vec![chrome.to_vec(), b" curl/8.5.0 ".to_vec(), chrome.to_vec()];
        let list = crate::config::key_header_is_list("user-agent");
        assert_eq!(key_values(&lines, list), vec![&chrome[..], b"curl/8.5.0"]);
        assert!(crate::config::key_header_is_list("x-api-key"));
    }

    #[test]
    fn ipv6_clients_in_one_64_share_a_bucket() {
        let (cfg, mut lim, store) = setup(TWO_LIMITS);
        let a = req("/", "[2001:db8:1:2::a]:1");
        let b = req("/", "[2001:db8:1:2::b]:1");
        let c = req("/", "[2001:db8:1:3::a]:1");
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &a, Class::Human, 3),
            3
        );
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &b, Class::Human, 5),
            2
        );
        assert_eq!(
            count_allowed(&cfg, &mut lim, &store, &c, Class::Human, 9),
            5
        );
    }

    #[test]
    fn store_faults_fall_back_and_still_limit() {
        for fault in [Fault::Error, Fault::CasMismatch, Fault::Truncate] {
            let (cfg, mut lim, store) = setup(TWO_LIMITS);
            store.fault.set(fault);
            let r = req("/", "9.9.9.9:1");
            let outs: Vec<_> = (0..8)
                .map(|_| run(&cfg, &mut lim, &store, &r, Class::Human))
                .collect();
            let allowed = outs
                .iter()
                .filter(|o| o.decision == Decision::Allowed)
                .count();
            assert_eq!(allowed, 5, "{fault:?}");
            assert!(outs.iter().all(|o| o.store.fell_back()), "{fault:?}");
            assert!(outs.iter().all(|o| matches!(
                o.decision,
                Decision::Allowed | Decision::Limited(OverLimit { status: 429, .. })
            )));
        }
    }

    /// A limiter with `slots` bucket slots and a 16-key fallback, over a fresh store.
    fn bare(slots: u32) -> (Limiter, MemStore) {
        let cfg = config::parse(
            format!(r#"{{"store":{{"slots":{slots},"cas_retries":4,"fallback_buckets":16}}}}"#)
                .as_bytes(),
        )
        .expect("valid config");
        let lim = Limiter::new(&cfg);
        let store = MemStore::default();
        assert_eq!(lim.table().precreate(&store), Ok(slots as usize));
        (lim, store)
    }

    fn fp_key(fp: u64) -> StateKey {
        StateKey {
            fp,
            group_fp: None,
            overflow_fp: 0,
        }
    }

    /// A global limit of `rate` (no compliance tracking).
    fn limit_of(rate: Rate) -> Limit {
        Limit {
            name: "t".into(),
            class: None,
            route: None,
            bucket: Some(crate::config::TokenBucket {
                rate_per_s: 1e9 / rate.emission_ns as f64,
                burst: rate.burst,
                rate,
            }),
            max_in_flight: None,
            key: KeyKind::Global,
            address_prefix: None,
            mode: Mode::Enforce,
            cost: None,
        }
    }

    /// Charges key `fp` one token: (allowed, store events, where it was taken).
    fn charge_at(
        lim: &mut Limiter,
        store: &MemStore,
        fp: u64,
        now: u64,
        rate: Rate,
    ) -> (bool, StoreEvents, Option<Placed>) {
        let mut ev = StoreEvents::default();
        let cfg = config::parse(b"").expect("default");
        let policy = *cfg.policy(Class::Human);
        let (c, _, at) = lim.charge(
            store,
            fp_key(fp),
            now,
            (0, &limit_of(rate)),
            1,
            (Class::Human, &policy),
            KeyRules {
                track: false,
                leasable: false,
                per_envoy: false,
            },
            &mut ev,
        );
        (matches!(c, Charged::Allowed { .. }), ev, at)
    }

    /// Charges key `fp` one token: (allowed, store events).
    fn charge(
        lim: &mut Limiter,
        store: &MemStore,
        fp: u64,
        now: u64,
        rate: Rate,
    ) -> (bool, StoreEvents) {
        let (ok, ev, _) = charge_at(lim, store, fp, now, rate);
        (ok, ev)
    }

    use crate::limits::bucket::Rate;

    #[test]
    fn a_shared_bucket_allows_exactly_burst_and_memory_is_bounded_by_slots() {
        let (mut lim, store) = bare(128);
        let rate = Rate::new(1.0, 5);
        let n = (0..20)
            .filter(|_| charge(&mut lim, &store, 77, T0, rate).0)
            .count();
        assert_eq!(n, 5);
        assert!(lim.fallback().is_empty());
        for fp in 1..10_000u64 {
            let _ = charge(&mut lim, &store, fp, T0 + fp, rate);
        }
        assert_eq!(store.len(), 128);
        assert!(lim.fallback().len() <= 16);
    }

    #[test]
    fn colliding_keys_are_not_merged_and_an_idle_slot_is_taken_over() {
        // One slot: both candidates are the same slot.
        let (mut lim, store) = bare(1);
        let rate = Rate::new(1.0, 2);
        assert!(charge(&mut lim, &store, 1, T0, rate).0);
        // Key 2 cannot share key 1's active bucket: it falls back, counted as a collision,
        // and still gets its own full burst.
        let (ok, ev) = charge(&mut lim, &store, 2, T0, rate);
        assert!(ok);
        assert_eq!(ev.collisions, 1);
        assert!(charge(&mut lim, &store, 2, T0, rate).0);
        assert!(!charge(&mut lim, &store, 2, T0, rate).0);
        // Key 1 still has exactly one token left.
        assert!(charge(&mut lim, &store, 1, T0, rate).0);
        assert!(!charge(&mut lim, &store, 1, T0, rate).0);
        // Two seconds later key 1's bucket is full again, so key 3 may own the slot.
        let (ok, ev) = charge(&mut lim, &store, 3, T0 + 2 * NS_PER_S, rate);
        assert!(ok);
        assert!(!ev.fell_back());
    }

    #[test]
    fn store_faults_fall_back_to_a_local_bucket_with_the_same_limit() {
        let (mut lim, store) = bare(8);
        store.fault.set(Fault::Error);
        let rate = Rate::new(1.0, 3);
        let charges: Vec<_> = (0..5)
            .map(|_| charge(&mut lim, &store, 9, T0, rate))
            .collect();
        assert!(charges.iter().all(|(_, ev)| ev.errors == 1));
        assert_eq!(charges.iter().filter(|(ok, _)| *ok).count(), 3);
    }

    /// How many distinct slots key `fp`'s bucket may be in (host calls to find it new).
    fn distinct_candidates(lim: &Limiter, fp: u64) -> u64 {
        let store = MemStore::default();
        assert!(lim.table().precreate(&store).is_ok());
        store.calls.set(0);
        let _ = lim.table().get(&store, fp_key(fp).fp, T0);
        store.calls.get()
    }

    #[test]
    fn cas_always_mismatching_falls_back_after_bounded_retries() {
        let (mut lim, store) = bare(8);
        store.fault.set(Fault::CasMismatch);
        let rate = Rate::new(1.0, 2);
        store.calls.set(0);
        let (ok, ev) = charge(&mut lim, &store, 9, T0, rate);
        assert!(ok);
        assert_eq!(ev.cas_exhausted, 1);
        // 5 attempts (1 + cas_retries 4), each: a get of every distinct candidate (all free;
        // each read to be sure the key owns none of them), one set.
        assert_eq!(store.calls.get(), 5 * (distinct_candidates(&lim, 9) + 1));
        assert!(charge(&mut lim, &store, 9, T0, rate).0);
        assert!(!charge(&mut lim, &store, 9, T0, rate).0);
    }

    #[test]
    fn truncated_slot_bytes_are_overwritten_and_still_limit() {
        let (mut lim, store) = bare(8);
        store.fault.set(Fault::Truncate);
        let rate = Rate::new(1.0, 2);
        let charges: Vec<_> = (0..5)
            .map(|_| charge(&mut lim, &store, 9, T0, rate))
            .collect();
        // Every read is truncated: each charge is decided by the local bucket, which still
        // limits at the same burst.
        assert!(charges.iter().all(|(_, ev)| ev.corrupt == 1));
        assert_eq!(charges.iter().filter(|(ok, _)| *ok).count(), 2);
        // Once the store is healthy again the reset slot is used normally.
        store.fault.set(Fault::None);
        let (_, ev) = charge(&mut lim, &store, 10, T0, rate);
        assert!(!ev.fell_back());
    }

    #[test]
    fn refund_restores_shared_and_local_tokens() {
        let (mut lim, store) = bare(8);
        let rate = Rate::new(1.0, 1);
        let (_, _, at) = charge_at(&mut lim, &store, 5, T0, rate);
        let at = at.expect("allowed");
        assert!(matches!(at, Placed::Shared(_)));
        assert!(!charge(&mut lim, &store, 5, T0, rate).0);
        lim.refund(&store, (fp_key(5), 0), at, Some(rate), 1, None, T0);
        assert!(charge(&mut lim, &store, 5, T0, rate).0);

        store.fault.set(Fault::Error);
        let (_, _, at) = charge_at(&mut lim, &store, 6, T0, rate);
        let at = at.expect("allowed");
        assert_eq!(at, Placed::Local(LocalPlace::Own));
        lim.refund(&store, (fp_key(6), 0), at, Some(rate), 1, None, T0);
        assert!(charge(&mut lim, &store, 6, T0, rate).0);
    }
}
