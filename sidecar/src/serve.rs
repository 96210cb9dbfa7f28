//! Serving: the verifier (with the fleet's Redis when configured), the background range
//! reloads, fetches and staleness checks, and the HTTP listener until SIGINT or SIGTERM.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::config::Config;
use crate::fetch::{next_delay, FetchOutcome, Fetcher};
use crate::fleet::Fleet;
use crate::metrics::Metrics;
use crate::range_reports::{report_fetch, report_refresh, report_staleness};
use crate::ranges::RangeStore;
use crate::redis_store::RedisStore;
use crate::resolver::{DnsSettings, HickoryResolver};
use crate::verify::{Verifier, VerifierSettings};

/// Runs the sidecar with a validated `config`, its `catalog` and the range sources already
/// loaded at start (`fetcher` when any is a URL): prints `listening on <addr>` on stdout
/// once bound, then serves until SIGINT or SIGTERM.
pub async fn serve(
    config: Config,
    catalog: std::collections::BTreeMap<String, crate::config::BotMethods>,
    ranges: Arc<RangeStore>,
    fetcher: Option<Arc<Fetcher>>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<()> {
    let timeout = Duration::from_millis(config.dns.timeout_ms);
    let resolver = HickoryResolver::new(&DnsSettings {
        nameservers: config.dns.nameservers.clone(),
        timeout,
        attempts: config.dns.attempts,
    })
    .context("configuring DNS resolution")?;
    let mut verifier = Verifier::new(
        Arc::new(resolver),
        ranges.clone(),
        catalog.clone(),
        VerifierSettings {
            ttl: config.ttl.clone(),
            cache_max_entries: config.cache.max_entries,
            max_concurrent_lookups: config.dns.max_concurrent_lookups,
            lookup_slot_wait: timeout,
            max_ptr_names: config.dns.max_ptr_names,
        },
        metrics.clone(),
    );
    let store = match config.redis.url.as_deref() {
        Some(url) => {
            if url.starts_with("rediss:") {
                // rustls with ring only; an error means a provider is already installed.
                let _ = rustls::crypto::ring::default_provider().install_default();
            }
            let store = Arc::new(
                RedisStore::new(&config.redis, metrics.clone())
                    .map_err(anyhow::Error::msg)
                    .context("configuring Redis")?,
            );
            tracing::info!(
                redis = store.target(),
                timeout_ms = config.redis.timeout_ms,
                prefix = %config.redis.prefix,
                "fleet mode on: bucket sync and shared verdicts in Redis"
            );
            verifier = verifier.with_shared_verdicts(store.clone());
            Some(store)
        }
        None => None,
    };
    let verifier = Arc::new(verifier);

    if !ranges.files().is_empty() {
        let (verifier, ranges) = (verifier.clone(), ranges.clone());
        let interval = Duration::from_secs(config.ranges.reload_interval_s);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await; // the first tick is immediate; the initial load is done
            loop {
                tick.tick().await;
                let store = ranges.clone();
                let Ok(outcomes) = tokio::task::spawn_blocking(move || store.refresh_files()).await
                else {
                    continue;
                };
                if report_refresh(&outcomes, verifier.metrics()) {
                    // Ranges changed: cached verdicts may be wrong now (both ways).
                    verifier.invalidate_cache();
                }
            }
        });
    }
    // Every range URL on its own schedule: fetched now (in the background: the sidecar
    // serves meanwhile, with cached copies and FCrDNS), then every refresh interval, sooner
    // after a failure.
    for url in fetcher.as_ref().map(|_| ranges.urls()).unwrap_or_default() {
        let Some(fetcher) = fetcher.clone() else {
            break;
        };
        let (verifier, ranges) = (verifier.clone(), ranges.clone());
        let interval = Duration::from_secs(config.ranges.refresh_interval_s);
        let retry = Duration::from_secs(config.ranges.retry_interval_s);
        tokio::spawn(async move {
            let mut failures = 0u32;
            loop {
                let outcome = fetcher.fetch(&ranges, &url).await;
                if report_fetch(&url, &outcome, verifier.metrics()) {
                    verifier.invalidate_cache();
                }
                failures = match outcome {
                    FetchOutcome::Failed { .. } => failures.saturating_add(1),
                    _ => 0,
                };
                let jitter = crate::fetch::jitter();
                tokio::time::sleep(next_delay(interval, retry, failures, jitter)).await;
            }
        });
    }
    if !ranges.sources().is_empty() {
        let ranges = ranges.clone();
        let max_age = Duration::from_secs(config.ranges.max_age_s);
        let tick = Duration::from_secs((config.ranges.max_age_s / 4).clamp(1, 60));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(tick).await;
                report_staleness(&ranges, max_age);
            }
        });
    }

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let bound = listener.local_addr().context("reading the bound address")?;
    tracing::info!(
        listen = %bound,
        bots = catalog.len(),
        nameservers = ?config.dns.nameservers,
        "crawlguard-sidecar ready"
    );
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {bound}").context("writing to stdout")?;
        out.flush().context("writing to stdout")?;
    }
    let agents = crate::agents::Agents::new(
        &config.agents,
        config.ranges.cache_dir().map(std::path::PathBuf::from),
        metrics.agents.clone(),
    )
    .map_err(anyhow::Error::msg)
    .context("configuring signed agents")?;
    let fleet = Fleet::new(store, metrics);
    let routes = crate::http::router_with_fleet(verifier, fleet)
        .merge(crate::agents::router(Arc::new(agents)));
    axum::serve(listener, routes)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("serving HTTP")
}

/// Resolves on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}
