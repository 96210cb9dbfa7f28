//! `crawlguard-verifier`: the HTTP sidecar that verifies bot claims for the crawlguard filter.
//!
//! Prints `listening on <addr>` on stdout once the socket is bound (logs go to stderr), so
//! scripts and tests can start it on port 0 and read the real port.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;

use crawlguard_verifier::config::Config;
use crawlguard_verifier::fleet::Fleet;
use crawlguard_verifier::metrics::{FileLabels, Metrics, ReloadLabels};
use crawlguard_verifier::ranges::{RangeStore, RefreshOutcome};
use crawlguard_verifier::redis_store::RedisStore;
use crawlguard_verifier::resolver::{DnsSettings, HickoryResolver};
use crawlguard_verifier::verify::{Verifier, VerifierSettings};

/// Verifies that a request claiming to be a known bot (Googlebot, Bingbot, GPTBot, ...)
/// comes from that bot's operator, by forward-confirmed reverse DNS and by the operator's
/// published IP-range files. Serves `GET /v1/verify?ip=..&bot=..`, `GET /healthz` and
/// `GET /metrics`; with `--redis` (fleet mode) also `POST /v1/fleet/sync`, and shares
/// verdicts with the other sidecars of the fleet.
///
/// Settings come from built-in defaults, then the config file, then these flags (a flag
/// wins over the file).
#[derive(Debug, Parser)]
#[command(name = "crawlguard-verifier", version)]
struct Cli {
    /// Address to listen on (ip:port). Port 0 picks a free port; the bound address is
    /// printed on stdout as `listening on IP:PORT`. [default: 127.0.0.1:9090]
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,

    /// Configuration file (TOML): bot catalog, range files, TTLs, DNS and cache settings.
    /// Without it the built-in catalog and defaults are used.
    #[arg(
        long,
        short = 'c',
        value_name = "FILE",
        env = "CRAWLGUARD_VERIFIER_CONFIG"
    )]
    config: Option<PathBuf>,

    /// DNS server to query, as ip:port (repeat for several). Without any, the system's
    /// /etc/resolv.conf is used.
    #[arg(long = "nameserver", value_name = "IP:PORT")]
    nameservers: Vec<SocketAddr>,

    /// Timeout of one DNS query attempt, in milliseconds. [default: 1000]
    #[arg(long, value_name = "MS")]
    dns_timeout_ms: Option<u64>,

    /// Attempts per DNS query (1 = no retry). [default: 2]
    #[arg(long, value_name = "N")]
    dns_attempts: Option<usize>,

    /// Maximum number of cached (ip, bot) verdicts. [default: 100000]
    #[arg(long, value_name = "N")]
    cache_max_entries: Option<u64>,

    /// Maximum number of verifications resolving DNS at once; others wait up to one DNS
    /// timeout, then answer `unknown`. [default: 256]
    #[arg(long, value_name = "N")]
    max_concurrent_lookups: Option<usize>,

    /// How often range files are checked for changes, in seconds. [default: 30]
    #[arg(long, value_name = "S")]
    reload_interval_s: Option<u64>,

    /// Lifetime of a `verified` verdict, in seconds. [default: 86400]
    #[arg(long, value_name = "S")]
    ttl_verified_s: Option<u64>,

    /// Lifetime of a `spoofed` verdict, in seconds. [default: 3600]
    #[arg(long, value_name = "S")]
    ttl_spoofed_s: Option<u64>,

    /// Lifetime of an `unknown` verdict, in seconds. [default: 30]
    #[arg(long, value_name = "S")]
    ttl_unknown_s: Option<u64>,

    /// Fleet mode: the Redis shared by every sidecar of the fleet, as
    /// `redis://[user:password@]host[:port][/db]`, `rediss://...` (TLS) or `unix:///path`.
    /// Without it `POST /v1/fleet/sync` answers 503. Prefer the environment variable for a
    /// URL with a password (command lines are visible to other users).
    #[arg(
        long,
        value_name = "URL",
        env = "CRAWLGUARD_VERIFIER_REDIS",
        hide_env_values = true
    )]
    redis: Option<String>,

    /// Bound on connecting to Redis and on every Redis operation, in milliseconds; a sync
    /// that takes longer answers 503. [default: 200]
    #[arg(long, value_name = "MS")]
    redis_timeout_ms: Option<u64>,

    /// Prefix of every Redis key this service writes. [default: crawlguard:]
    #[arg(long, value_name = "PREFIX")]
    redis_prefix: Option<String>,

    /// Log filter (tracing EnvFilter syntax, e.g. `info` or `crawlguard_verifier=debug`).
    /// Falls back to RUST_LOG, then `info`. Logs go to stderr.
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,

    /// Print the default configuration (with the built-in catalog) as TOML and exit.
    #[arg(long)]
    print_default_config: bool,

    /// Load and validate the configuration and range files, report, and exit (status 1 on
    /// any error).
    #[arg(long)]
    check_config: bool,
}

impl Cli {
    fn apply(&self, c: &mut Config) {
        if let Some(v) = self.listen {
            c.listen = v;
        }
        if !self.nameservers.is_empty() {
            c.dns.nameservers = self.nameservers.clone();
        }
        if let Some(v) = self.dns_timeout_ms {
            c.dns.timeout_ms = v;
        }
        if let Some(v) = self.dns_attempts {
            c.dns.attempts = v;
        }
        if let Some(v) = self.cache_max_entries {
            c.cache.max_entries = v;
        }
        if let Some(v) = self.max_concurrent_lookups {
            c.dns.max_concurrent_lookups = v;
        }
        if let Some(v) = self.reload_interval_s {
            c.ranges.reload_interval_s = v;
        }
        if let Some(v) = self.ttl_verified_s {
            c.ttl.verified_s = v;
        }
        if let Some(v) = self.ttl_spoofed_s {
            c.ttl.spoofed_s = v;
        }
        if let Some(v) = self.ttl_unknown_s {
            c.ttl.unknown_s = v;
        }
        if let Some(v) = &self.redis {
            c.redis.url = Some(v.clone());
        }
        if let Some(v) = self.redis_timeout_ms {
            c.redis.timeout_ms = v;
        }
        if let Some(v) = &self.redis_prefix {
            c.redis.prefix = v.clone();
        }
    }
}

/// Logs and counts what a range refresh did; true when any file's ranges changed.
fn report_refresh(outcomes: &[(PathBuf, RefreshOutcome)], metrics: &Metrics) -> bool {
    let mut changed = false;
    for (path, outcome) in outcomes {
        let file = path.display().to_string();
        let result = match outcome {
            RefreshOutcome::Unchanged => continue,
            RefreshOutcome::Loaded { prefixes } => {
                tracing::info!(file, prefixes, "range file loaded");
                metrics
                    .range_prefixes
                    .get_or_create(&FileLabels { file: file.clone() })
                    .set(*prefixes as i64);
                changed = true;
                "ok"
            }
            RefreshOutcome::Failed {
                error,
                kept_prefixes,
            } => {
                tracing::error!(file, %error, kept_prefixes, "range file rejected; keeping previous ranges");
                metrics
                    .range_prefixes
                    .get_or_create(&FileLabels { file: file.clone() })
                    .set(*kept_prefixes as i64);
                "error"
            }
        };
        metrics
            .range_reloads
            .get_or_create(&ReloadLabels {
                file,
                result: result.to_string(),
            })
            .inc();
    }
    changed
}

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

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.print_default_config {
        print!("{}", Config::default_toml()?);
        return Ok(());
    }

    let filter = match &cli.log_level {
        Some(directive) => EnvFilter::try_new(directive)
            .with_context(|| format!("--log-level: invalid filter {directive:?}"))?,
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only for a terminal; log collectors get plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .init();

    let mut config = match &cli.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    cli.apply(&mut config);
    config.validate().context("invalid configuration")?;

    let catalog = config.catalog()?;
    let range_paths: std::collections::BTreeSet<PathBuf> = catalog
        .values()
        .flat_map(|m| m.ranges.iter().cloned())
        .collect();
    let ranges = Arc::new(RangeStore::new(range_paths));
    let metrics = Arc::new(Metrics::new());
    let initial = ranges.refresh();
    report_refresh(&initial, &metrics);

    if cli.check_config {
        let failed = initial
            .iter()
            .any(|(_, o)| matches!(o, RefreshOutcome::Failed { .. }));
        println!(
            "configuration ok: {} bots, {} range files{}",
            catalog.len(),
            initial.len(),
            if failed {
                ", SOME RANGE FILES FAILED"
            } else {
                ""
            }
        );
        std::process::exit(i32::from(failed));
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(config, catalog, ranges, metrics))
}

async fn serve(
    config: Config,
    catalog: std::collections::BTreeMap<String, crawlguard_verifier::config::BotMethods>,
    ranges: Arc<RangeStore>,
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

    if !ranges.paths().is_empty() {
        let verifier = verifier.clone();
        let interval = Duration::from_secs(config.ranges.reload_interval_s);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await; // the first tick is immediate; the initial load is done
            loop {
                tick.tick().await;
                let store = ranges.clone();
                let Ok(outcomes) = tokio::task::spawn_blocking(move || store.refresh()).await
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

    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let bound = listener.local_addr().context("reading the bound address")?;
    tracing::info!(
        listen = %bound,
        bots = catalog.len(),
        nameservers = ?config.dns.nameservers,
        "crawlguard-verifier ready"
    );
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {bound}").context("writing to stdout")?;
        out.flush().context("writing to stdout")?;
    }
    let fleet = Fleet::new(store, metrics);
    axum::serve(
        listener,
        crawlguard_verifier::http::router_with_fleet(verifier, fleet),
    )
    .with_graceful_shutdown(shutdown_signal())
    .await
    .context("serving HTTP")
}
