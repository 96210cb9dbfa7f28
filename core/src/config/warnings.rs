//! What a configuration may say but probably does not mean: one line per finding, starting
//! with the field path. [`super::Config::warnings`] holds them; `on_configure` logs each at
//! warn level as `configuration warning: <line>` and `crawlguard check-config` prints them.
//! None refuses the configuration.

use super::defaults::default_limits;
use super::StoreConfig;
use super::{ClassPolicy, Limit, Mode, Route, DEFAULT_ROUTE};
use crate::identity::class::{Class, PerClass};
use crate::limits::bucket::NS_PER_S;
use crate::store::PUBLISHED_HASH_SEED;

/// One warning per (limit, class it applies to) whose refill interval, `1 / rate_per_s`, is
/// longer than the class's `retry_after.max_s`: a client that waits the clamped Retry-After
/// comes back before a token has, and is rejected again. The clamp is the operator's choice
/// and stays; the warning says what it costs. A limit of class `*` is checked against every
/// class. A cost-based limit is warned about, too, when refilling its whole burst takes
/// longer than `max_s`: a key that a costly response put in debt is then told to come back
/// before it can be admitted.
pub(super) fn retry_after(limits: &[Limit], classes: &PerClass<ClassPolicy>) -> Vec<String> {
    let mut out = Vec::new();
    for (i, l) in limits.iter().enumerate() {
        // A limit of requests in flight only refills nothing: a place frees when a request
        // ends, whenever that is.
        let Some(b) = l.bucket else {
            continue;
        };
        for (class, policy) in classes.iter() {
            if l.class.is_some_and(|c| c != class) {
                continue;
            }
            let max_s = policy.retry_after.max_s;
            if u128::from(b.rate.emission_ns) > u128::from(max_s) * u128::from(NS_PER_S) {
                out.push(format!(
                    "limits[{i}].rate_per_s: limit {:?} refills one token every {} s \
                     (1 / rate_per_s), longer than classes.{class}.retry_after.max_s ({max_s} s): \
                     a client of class {class} that waits Retry-After can be rejected again",
                    l.name,
                    b.rate.emission_ns as f64 / NS_PER_S as f64,
                    class = class.as_str(),
                ));
            } else if l.cost.is_some()
                && b.rate.capacity_ns() > u128::from(max_s) * u128::from(NS_PER_S)
            {
                // Retry-After covers a cost-based key's debt only up to the class cap.
                out.push(format!(
                    "limits[{i}].cost: limit {:?} takes {} s to refill its burst (burst / \
                     rate_per_s), longer than classes.{class}.retry_after.max_s ({max_s} s): \
                     a client of class {class} whose costs spent the burst (or put it in debt) \
                     and that waits Retry-After can be rejected again",
                    l.name,
                    b.rate.capacity_ns() as f64 / NS_PER_S as f64,
                    class = class.as_str(),
                ));
            }
        }
    }
    out
}

/// One warning per class that some route leaves without an enforced limit: its requests
/// there are never limited. A configuration's own `limits` replace all the defaults, so
/// adding a route limit used to drop the `spoofed` and `unverified_bot` protections without
/// a word. A limit in shadow mode protects nothing and does not count, unless the global
/// `mode` is `shadow` (then the whole configuration is a trial and its limits count).
/// Routes are named as in `limits[].route`; `routes.len()` is `default`. Without
/// `client_signals.asn_header` (`asn_header_set` false) a limit keyed by `asn` covers
/// nothing: no request's network is known, so it never charges anyone. Nor does a limit
/// keyed by `bot` cover `human` or `suspect_browser` (a limit of class `*`): their
/// requests name no bot id.
pub(super) fn uncovered_classes(
    limits: &[Limit],
    routes: &[Route],
    mode: Mode,
    asn_header_set: bool,
) -> Vec<String> {
    let defaults = default_limits();
    let mut out = Vec::new();
    for class in Class::ALL {
        let applies = |l: &&Limit, r: usize| {
            (l.mode == Mode::Enforce || mode == Mode::Shadow)
                && l.class.is_none_or(|c| c == class)
                && l.route.is_none_or(|lr| lr == r)
        };
        // Keys that charge none of this class's requests: `asn` without its header, `bot`
        // for the classes that name no bot id (a limit of class `*` reaches them too).
        let inert_asn = |l: &Limit| !asn_header_set && l.key.has_asn();
        let inert_bot = |l: &Limit| l.key.has_bot() && class.names_no_bot();
        let (mut inert_asn_keys, mut inert_bot_keys) = (false, false);
        let uncovered: Vec<&str> = (0..=routes.len())
            .filter(|&r| {
                let covering = || limits.iter().filter(|l| applies(l, r));
                let uncovered = !covering().any(|l| !inert_asn(l) && !inert_bot(l));
                inert_asn_keys |= uncovered && covering().any(inert_asn);
                inert_bot_keys |= uncovered && covering().any(inert_bot);
                uncovered
            })
            .map(|r| routes.get(r).map_or(DEFAULT_ROUTE, |rt| rt.name.as_str()))
            .collect();
        if uncovered.is_empty() {
            continue;
        }
        let whereabouts = if uncovered.len() == routes.len() + 1 {
            String::new()
        } else if uncovered.len() == 1 {
            format!(" on route {}", uncovered.join(", "))
        } else {
            format!(" on routes {}", uncovered.join(", "))
        };
        let theirs: Vec<String> = defaults
            .iter()
            .filter(|d| d.class == class.as_str())
            .map(|d| {
                let bucket = match (d.rate_per_s, d.burst) {
                    (Some(r), Some(b)) => format!("{r}/s, burst {b}, "),
                    _ => String::new(),
                };
                let in_flight = d
                    .max_in_flight
                    .map_or(String::new(), |m| format!("at most {m} in flight, "));
                format!("{} ({bucket}{in_flight}key {})", d.name, d.key_label())
            })
            .collect();
        out.push(format!(
            "limits: no enforced limit covers class {c}{whereabouts}: its requests{there} are \
             never limited ({inert}a configuration's own limits replace all {n} defaults; the \
             default for {c}: {theirs})",
            c = class.as_str(),
            there = if whereabouts.is_empty() { "" } else { " there" },
            inert = [
                (
                    inert_asn_keys,
                    "its limits keyed by asn charge no one while \
                                  client_signals.asn_header is unset; "
                ),
                (
                    inert_bot_keys,
                    "its limits keyed by bot charge no one: its requests \
                                  name no bot id; "
                ),
            ]
            .iter()
            .filter_map(|(on, why)| on.then_some(*why))
            .collect::<String>(),
            n = defaults.len(),
            theirs = theirs.join(" and "),
        ));
    }
    out
}

/// A warning when `/robots.txt` is not among `exempt_paths` (a configuration's own list
/// replaces the default one, which has it): crawlers fetching it are then limited, and a
/// crawler refused its robots.txt may stop crawling the site (Googlebot treats a 429 or 5xx
/// for robots.txt as a server error and stops crawling until it gets an answer).
pub(super) fn robots_txt_not_exempt(exempt_paths: &[String]) -> Option<String> {
    if exempt_paths.iter().any(|p| p == "/robots.txt") {
        return None;
    }
    Some(
        "exempt_paths: \"/robots.txt\" is not exempt: crawlers fetching it are limited like \
         any page, and a crawler refused its robots.txt may stop crawling the site (Googlebot \
         treats a 429 or 5xx there as a server error); the default list exempts it, a \
         configuration's own list replaces the default"
            .into(),
    )
}

/// A warning when `exempt_paths` lists `/`: legal (a site may serve a static, cached home
/// page), but the home page is what floods and crawlers hit most, and an exempt path is
/// limited by `exempt_limit` only, never by a class limit nor shed; so almost surely a
/// mistake for a prefix (exempt paths match exactly).
pub(super) fn home_page_exempt(exempt_paths: &[String]) -> Option<String> {
    let i = exempt_paths.iter().position(|p| p == "/")?;
    Some(format!(
        "exempt_paths[{i}]: \"/\" exempts the home page from every class limit and from \
         shedding (only exempt_limit applies); exempt paths match exactly, so it does not \
         exempt anything below it"
    ))
}

/// A warning when `store.hash_seed` is the seed published in crawlguard's source (the old
/// default, and what offline tools use): anyone can compute keys that collide in the slot
/// table and push a client onto the per-worker fallback.
pub(super) fn published_hash_seed(store: &StoreConfig) -> Option<String> {
    (store.hash_seed == Some(PUBLISHED_HASH_SEED)).then(|| {
        "store.hash_seed: is the seed published in crawlguard's source, so anyone can plan \
         slot collisions; remove it (each Envoy then draws a random one) or set a secret one"
            .to_string()
    })
}
