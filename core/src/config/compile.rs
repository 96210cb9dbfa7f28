//! Validation: turns the raw document into a [`Config`], one `compile_<section>` per
//! section; the first problem found is the error, naming the field path.

use super::classes::{
    compile_bots, compile_classes, compile_non_browser_class, compile_retry_after,
};
use super::client_signals::compile_client_signals;
use super::defaults::{default_exempt_paths, default_limits, DEFAULT_CLASS_HEADER};
use super::headers::{header_name, taken_over_header_name};
use super::limits::{compile_exempt_limit, compile_limits};
use super::raw::{RawConfig, RawShedding};
use super::warnings;
use super::{
    defaults, err, is_name, BrowserCheckMode, BrowserChecks, ClientIpConfig, Config, ConfigError,
    FleetConfig, Mode, RetryAfter, RewriteConfig, Route, ShedThresholds, Shedding, StoreConfig,
    VerifierConfig, DEFAULT_ROUTE,
};
use std::collections::HashSet;

/// Validates every section of `raw` and builds the [`Config`].
pub(super) fn compile(raw: RawConfig) -> Result<Config, ConfigError> {
    let client_ip = compile_client_ip(raw.client_ip)?;
    let classifier = compile_bots(raw.bots, raw.bots_mode)?
        .with_non_browser_class(compile_non_browser_class(raw.non_browser_class)?);
    let classes = compile_classes(&raw.classes)?;
    compile_routes(&raw.routes)?;
    // Before the limits: a limit may not be keyed by the class header.
    let class_header = taken_over_header_name(
        "class_header",
        raw.class_header.as_deref().unwrap_or(DEFAULT_CLASS_HEADER),
    )?;
    let limits = compile_limits(
        raw.limits.unwrap_or_else(default_limits),
        &raw.routes,
        raw.mode,
        &class_header,
        &client_ip,
    )?;
    let mut cost_headers: Vec<String> = limits
        .iter()
        .filter_map(|l| l.cost.as_ref().map(|c| c.from_response_header.clone()))
        .collect();
    cost_headers.sort();
    cost_headers.dedup();
    let exempt_paths = compile_exempt_paths(raw.exempt_paths.unwrap_or_else(default_exempt_paths))?;
    let exempt_limit = compile_exempt_limit(&raw.exempt_limit, raw.mode)?;
    let mut found = warnings::retry_after(&limits, &classes);
    found.extend(warnings::uncovered_classes(
        &limits,
        &raw.routes,
        raw.mode,
        raw.client_signals.asn_header.is_some(),
    ));
    found.extend(warnings::robots_txt_not_exempt(&exempt_paths));
    found.extend(warnings::home_page_exempt(&exempt_paths));
    compile_store(&raw.store)?;
    found.extend(warnings::published_hash_seed(&raw.store));
    compile_verifier(&raw.verifier)?;
    compile_fleet(&raw.fleet)?;
    if raw.fleet.enabled {
        fleet_refills(&limits)?;
    }
    if raw.fleet.enabled && raw.store.hash_seed.is_none() {
        return Err(err(
            "store.hash_seed",
            "required when fleet.enabled: every replica must hash a client to the same fleet \
             key; set the same secret random u64 on every replica",
        ));
    }
    let shedding = compile_shedding(&raw.shedding, &raw.routes, raw.mode)?;
    let browser_checks = compile_browser_checks(&raw.browser_checks)?;
    let client_signals = compile_client_signals(raw.client_signals, &class_header)?;
    let asn_keyed_classes = limits
        .iter()
        .filter(|l| l.key.has_asn())
        .fold(0u32, |bits, l| match l.class {
            Some(c) => bits | 1 << (c as u32),
            None => u32::MAX,
        });
    let bot_ids: Vec<&str> = classifier.entries().iter().map(|b| b.id.as_str()).collect();
    let signed_agents = super::signed_agents::compile(&raw.signed_agents, &bot_ids)?;
    compile_rewrite(&raw.rewrite, &shedding.retry_after)?;
    let degraded = match &raw.degraded {
        None => None,
        Some(h) => Some(header_name("degraded", h)?),
    };
    Ok(Config {
        browser_checks,
        client_signals,
        asn_keyed_classes,
        signed_agents,
        mode: raw.mode,
        client_ip,
        classifier,
        classes,
        routes: raw.routes,
        limits,
        cost_headers,
        exempt_paths,
        exempt_limit,
        class_header,
        ratelimit_headers: raw.ratelimit_headers,
        store: raw.store,
        verifier: raw.verifier,
        fleet: raw.fleet,
        rewrite: raw.rewrite,
        shedding,
        degraded,
        warnings: found,
    })
}

/// `client_ip`: prefix lengths and trusted hops in range.
fn compile_client_ip(ci: ClientIpConfig) -> Result<ClientIpConfig, ConfigError> {
    if ci.ipv4_prefix_len > 32 {
        return Err(err("client_ip.ipv4_prefix_len", "must be 0..=32"));
    }
    if ci.ipv6_prefix_len > 128 {
        return Err(err("client_ip.ipv6_prefix_len", "must be 0..=128"));
    }
    if !(1..=16).contains(&ci.xff_trusted_hops) {
        return Err(err("client_ip.xff_trusted_hops", "must be 1..=16"));
    }

    Ok(ci)
}

/// `routes`: unique names (not `default`), prefixes starting with `/`.
fn compile_routes(routes: &[Route]) -> Result<(), ConfigError> {
    let mut route_names = HashSet::new();
    for (i, r) in routes.iter().enumerate() {
        let p = format!("routes[{i}]");
        if !is_name(&r.name, false) || r.name == DEFAULT_ROUTE {
            return Err(err(
                format!("{p}.name"),
                "must be 1..=64 chars of [a-z0-9_-] and not \"default\"",
            ));
        }
        if !route_names.insert(r.name.as_str()) {
            return Err(err(
                format!("{p}.name"),
                format!("duplicate route {:?}", r.name),
            ));
        }
        if !r.path_prefix.starts_with('/') {
            return Err(err(format!("{p}.path_prefix"), "must start with '/'"));
        }
    }

    Ok(())
}

/// `exempt_paths`: each starts with `/`, has no query or fragment, and is visible ASCII
/// (a `:path` is: RFC 9113 section 8.3.1, RFC 3986 section 3.3), so it can match; none
/// twice (a repeated entry is a typo for another path).
fn compile_exempt_paths(exempt_paths: Vec<String>) -> Result<Vec<String>, ConfigError> {
    for (i, e) in exempt_paths.iter().enumerate() {
        if !e.starts_with('/') || e.contains(['?', '#']) || !e.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(err(
                format!("exempt_paths[{i}]"),
                "must start with '/', have no query or fragment, and be visible ASCII \
                 (percent-encode anything else)",
            ));
        }
        if let Some(j) = exempt_paths.iter().take(i).position(|p| p == e) {
            return Err(err(
                format!("exempt_paths[{i}]"),
                format!("{e:?} is also exempt_paths[{j}]"),
            ));
        }
    }

    Ok(exempt_paths)
}

/// `store`: slot count, CAS retries and fallback capacity in range.
fn compile_store(st: &StoreConfig) -> Result<(), ConfigError> {
    if !(1..=1_048_576).contains(&st.slots) {
        return Err(err("store.slots", "must be 1..=1048576"));
    }
    if st.cas_retries > 32 {
        return Err(err("store.cas_retries", "must be 0..=32"));
    }
    if !(1..=1_000_000).contains(&st.fallback_buckets) {
        return Err(err("store.fallback_buckets", "must be 1..=1000000"));
    }

    Ok(())
}

/// 1..=128 printable ASCII chars (a cluster name or an `:authority`).
fn printable(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic())
}

/// In fleet mode every limit refills within the fleet contract's bound
/// ([`crawlguard_contract::fleet::MAX_AHEAD_NS`], about 104 days): the sidecar could not
/// keep a slower bucket exactly.
fn fleet_refills(limits: &[crate::config::Limit]) -> Result<(), ConfigError> {
    let max_s = crawlguard_contract::fleet::MAX_AHEAD_NS / 1_000_000_000;
    for (i, l) in limits.iter().enumerate() {
        let Some(b) = l.bucket else {
            // Requests in flight are counted per Envoy, never synced.
            continue;
        };
        let refill_ns = u128::from(b.rate.emission_ns) * u128::from(b.rate.burst);
        if refill_ns > u128::from(crawlguard_contract::fleet::MAX_AHEAD_NS) {
            return Err(err(
                format!("limits[{i}].rate_per_s"),
                format!(
                    "in fleet mode burst / rate_per_s must be <= {max_s} s (the fleet \
                     contract's bound, about 104 days), is {} s",
                    // Rounded up, as the one-year bound's message is.
                    (f64::from(b.burst) / b.rate_per_s).ceil()
                ),
            ));
        }
    }
    Ok(())
}

/// `fleet`: printable cluster and authority; interval, timeout and batch size in range.
fn compile_fleet(f: &FleetConfig) -> Result<(), ConfigError> {
    if !printable(&f.cluster) {
        return Err(err(
            "fleet.cluster",
            "must be 1..=128 printable ASCII chars",
        ));
    }
    if !printable(&f.authority) {
        return Err(err(
            "fleet.authority",
            "must be 1..=128 printable ASCII chars",
        ));
    }
    // The sidecar refuses syncs announcing any other interval.
    let lo = crawlguard_contract::fleet::MIN_INTERVAL_MS;
    let hi = crawlguard_contract::fleet::MAX_INTERVAL_MS;
    if !(lo..=hi).contains(&f.sync_interval_ms) {
        return Err(err(
            "fleet.sync_interval_ms",
            format!("must be {lo}..={hi}"),
        ));
    }
    if !(10..=f.sync_interval_ms).contains(&f.timeout_ms) {
        return Err(err(
            "fleet.timeout_ms",
            "must be 10..=fleet.sync_interval_ms (one sync in flight at a time)",
        ));
    }
    let max_keys = u32::try_from(crawlguard_contract::fleet::MAX_KEYS).unwrap_or(u32::MAX);
    if !(1..=max_keys).contains(&f.max_keys_per_sync) {
        return Err(err(
            "fleet.max_keys_per_sync",
            format!("must be 1..={max_keys}"),
        ));
    }
    if !(1..=10_000).contains(&f.max_replicas) {
        return Err(err("fleet.max_replicas", "must be 1..=10000"));
    }
    Ok(())
}

/// `verifier`: printable cluster and authority, timeouts and TTLs in range.
fn compile_verifier(v: &VerifierConfig) -> Result<(), ConfigError> {
    if !printable(&v.cluster) {
        return Err(err(
            "verifier.cluster",
            "must be 1..=128 printable ASCII chars",
        ));
    }
    if !printable(&v.authority) {
        return Err(err(
            "verifier.authority",
            "must be 1..=128 printable ASCII chars",
        ));
    }
    if !(10..=10_000).contains(&v.timeout_ms) {
        return Err(err("verifier.timeout_ms", "must be 10..=10000"));
    }
    if !(1..=1_048_576).contains(&v.cache_slots) {
        return Err(err("verifier.cache_slots", "must be 1..=1048576"));
    }
    if !(1..=604_800).contains(&v.max_ttl_s) {
        return Err(err("verifier.max_ttl_s", "must be 1..=604800"));
    }
    if !(1..=3_600).contains(&v.unknown_ttl_s) {
        return Err(err("verifier.unknown_ttl_s", "must be 1..=3600"));
    }
    if !(1..=3_600).contains(&v.error_ttl_s) {
        return Err(err("verifier.error_ttl_s", "must be 1..=3600"));
    }
    if v.stale_if_error_s > 604_800 {
        return Err(err("verifier.stale_if_error_s", "must be 0..=604800"));
    }
    if v.max_spoofed_per_prefix > 1_000 {
        return Err(err("verifier.max_spoofed_per_prefix", "must be 0..=1000"));
    }
    if v.ranges_refresh_s > 86_400 {
        return Err(err("verifier.ranges_refresh_s", "must be 0..=86400"));
    }

    Ok(())
}

/// `rewrite`: statuses in 400..=599; a 503's longest kept Retry-After in
/// `shedding.retry_after.max_s` (`shed`)..=86400.
fn compile_rewrite(rewrite: &RewriteConfig, shed: &RetryAfter) -> Result<(), ConfigError> {
    for (i, s) in rewrite.statuses.iter().enumerate() {
        if !(400..=599).contains(s) {
            return Err(err(format!("rewrite.statuses[{i}]"), "must be 400..=599"));
        }
    }
    if !(shed.max_s..=86_400).contains(&rewrite.max_retry_after_s) {
        return Err(err(
            "rewrite.max_retry_after_s",
            format!(
                "must be in shedding.retry_after.max_s..=86400 (shedding.retry_after.max_s is {})",
                shed.max_s
            ),
        ));
    }
    Ok(())
}

/// An error ratio (0..=1) as per thousand, naming `path` when out of range.
fn permille(path: &str, ratio: f64) -> Result<u32, ConfigError> {
    if !(ratio.is_finite() && (0.0..=1.0).contains(&ratio)) {
        return Err(err(path, "must be 0..=1"));
    }
    // In range, so the cast cannot saturate.
    Ok((ratio * 1000.0).round() as u32)
}

/// `shedding`: thresholds (and route overrides naming known routes), window, step and
/// order in range; the order names each class once.
fn compile_shedding(
    raw: &RawShedding,
    routes: &[Route],
    mode: Mode,
) -> Result<Shedding, ConfigError> {
    use defaults::shedding as d;
    let latency_ms = raw.latency_ms.unwrap_or(d::LATENCY_MS);
    if !(1..=600_000).contains(&latency_ms) {
        return Err(err("shedding.latency_ms", "must be 1..=600000"));
    }
    let error_permille = permille(
        "shedding.error_ratio",
        raw.error_ratio.unwrap_or(d::ERROR_RATIO),
    )?;
    let base = ShedThresholds {
        latency_ms,
        error_permille,
    };
    let mut thresholds = vec![base; routes.len() + 1];
    for (name, o) in &raw.routes {
        let p = format!("shedding.routes.{name}");
        let idx = if name == DEFAULT_ROUTE {
            routes.len()
        } else {
            routes
                .iter()
                .position(|r| r.name == *name)
                .ok_or_else(|| err(&p, format!("unknown route {name:?} (define it in routes)")))?
        };
        let mut t = base;
        if let Some(ms) = o.latency_ms {
            if !(1..=600_000).contains(&ms) {
                return Err(err(format!("{p}.latency_ms"), "must be 1..=600000"));
            }
            t.latency_ms = ms;
        }
        if let Some(r) = o.error_ratio {
            t.error_permille = permille(&format!("{p}.error_ratio"), r)?;
        }
        if let Some(slot) = thresholds.get_mut(idx) {
            *slot = t;
        }
    }
    let window_s = raw.window_s.unwrap_or(d::WINDOW_S);
    if !(1..=crate::protection::origin_health::MAX_WINDOW_S as u32).contains(&window_s) {
        return Err(err("shedding.window_s", "must be 1..=60"));
    }
    let step_s = raw.step_s.unwrap_or(d::STEP_S);
    if !(1..=3_600).contains(&step_s) {
        return Err(err("shedding.step_s", "must be 1..=3600"));
    }
    let min_clients = raw.min_clients.unwrap_or(d::MIN_CLIENTS);
    if !(1..=crate::protection::top_clients::TOP_CLIENTS as u32).contains(&min_clients) {
        return Err(err("shedding.min_clients", "must be 1..=8"));
    }
    let min_requests = raw.min_requests.unwrap_or(d::MIN_REQUESTS);
    if !(1..=1_000_000).contains(&min_requests) {
        return Err(err("shedding.min_requests", "must be 1..=1000000"));
    }
    let order = raw.order.clone().unwrap_or_else(|| d::ORDER.to_vec());
    let mut seen = HashSet::new();
    for (i, c) in order.iter().enumerate() {
        if !seen.insert(*c) {
            return Err(err(
                format!("shedding.order[{i}]"),
                format!("{} is listed twice", c.as_str()),
            ));
        }
    }
    let retry_after = compile_retry_after(
        "shedding.retry_after",
        raw.retry_after.as_ref(),
        d::RETRY_AFTER,
    )?;
    Ok(Shedding {
        enabled: raw.enabled.unwrap_or(d::ENABLED),
        mode: raw.mode.unwrap_or(mode),
        thresholds,
        window_s,
        min_requests,
        step_s,
        min_clients,
        order,
        retry_after,
    })
}

/// `browser_checks`: a mode per catalog check id; an id the catalog lacks is refused.
fn compile_browser_checks(
    raw: &std::collections::BTreeMap<String, BrowserCheckMode>,
) -> Result<BrowserChecks, ConfigError> {
    let checks = crate::identity::catalog::builtin_browser_checks();
    for id in raw.keys() {
        if !checks.iter().any(|c| c.id == id) {
            let known: Vec<&str> = checks.iter().map(|c| c.id).collect();
            return Err(err(
                format!("browser_checks.{id}"),
                format!("unknown check (the catalog has {})", known.join(", ")),
            ));
        }
    }
    Ok(BrowserChecks {
        modes: checks
            .iter()
            .map(|c| raw.get(c.id).copied().unwrap_or_default())
            .collect(),
    })
}
