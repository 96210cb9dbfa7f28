//! `crawlguard-sidecar`: the HTTP sidecar that verifies bot claims for the crawlguard filter.
//!
//! Prints `listening on <addr>` on stdout once the socket is bound (logs go to stderr), so
//! scripts and tests can start it on port 0 and read the real port.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;

use crawlguard_sidecar::check::check_verdict;
use crawlguard_sidecar::config::Config;
use crawlguard_sidecar::fetch::{CacheOutcome, FetchSettings, Fetcher};
use crawlguard_sidecar::metrics::Metrics;
use crawlguard_sidecar::range_reports::{report_refresh, report_staleness, update_source_gauges};
use crawlguard_sidecar::ranges::{RangeSource, RangeStore};
use crawlguard_sidecar::serve::serve;

/// Verifies that a request claiming to be a known bot (Googlebot, Bingbot, GPTBot, ...)
/// comes from that bot's operator, by forward-confirmed reverse DNS and by the operator's
/// published IP ranges (fetched from the vendors' URLs and kept fresh, or read from files).
/// Serves `GET /v1/verify?ip=..&bot=..`, `GET /healthz` and `GET /metrics`; with `--redis`
/// (fleet mode) also `POST /v1/fleet/sync`, and shares verdicts with the other sidecars of
/// the fleet.
///
/// Settings come from built-in defaults, then the config file, then these flags (a flag
/// wins over the file).
#[derive(Debug, Parser)]
#[command(name = "crawlguard-sidecar", version)]
struct Cli {
    /// Address to listen on (ip:port). Port 0 picks a free port; the bound address is
    /// printed on stdout as `listening on IP:PORT`. [default: 127.0.0.1:9090]
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,

    /// Configuration file (TOML): bot catalog, range sources (URLs and files), TTLs, DNS and
    /// cache settings.
    /// Without it the built-in catalog and defaults are used.
    #[arg(
        long,
        short = 'c',
        value_name = "FILE",
        env = "CRAWLGUARD_SIDECAR_CONFIG"
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
    /// timeout, then answer 503 (a verifier error to the filter). [default: 256]
    #[arg(long, value_name = "N")]
    max_concurrent_lookups: Option<usize>,

    /// How often range files are checked for changes, in seconds. [default: 30]
    #[arg(long, value_name = "S")]
    reload_interval_s: Option<u64>,

    /// How often range URLs are fetched (conditional GET, ±10% jitter), in seconds.
    /// [default: 21600]
    #[arg(long, value_name = "S")]
    refresh_interval_s: Option<u64>,

    /// A range source whose data is older than this is reported stale (log line and
    /// metric; its ranges stay in use), in seconds. [default: 259200]
    #[arg(long, value_name = "S")]
    range_max_age_s: Option<u64>,

    /// Directory for the last good copy of every range URL, used at start before the first
    /// fetch; an empty value keeps no copy. [default: /var/cache/crawlguard-sidecar]
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,

    /// Do not fetch the vendors' range URLs of the built-in catalog: only range sources the
    /// configuration names are used (`ranges.builtin_urls = false`).
    #[arg(long)]
    no_builtin_range_urls: bool,

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
        env = "CRAWLGUARD_SIDECAR_REDIS",
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

    /// Log filter (tracing EnvFilter syntax, e.g. `info` or `crawlguard_sidecar=debug`).
    /// Falls back to RUST_LOG, then `info`. Logs go to stderr.
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,

    /// Print the default configuration (with the built-in catalog) as TOML and exit.
    #[arg(long)]
    print_default_config: bool,

    /// Load and validate the configuration, the range files and the cached copies of the
    /// range URLs (nothing is fetched), report, and exit (status 1 on
    /// any error).
    #[arg(long)]
    check_config: bool,

    /// Tests only: let agent key directories be fetched from loopback addresses (never
    /// private or link-local ones). Do not use in production.
    #[arg(long, hide = true)]
    allow_loopback_agent_directories: bool,
}

impl Cli {
    fn apply(&self, c: &mut Config) {
        c.agents.allow_loopback = self.allow_loopback_agent_directories;
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
        if let Some(v) = self.refresh_interval_s {
            c.ranges.refresh_interval_s = v;
        }
        if let Some(v) = self.range_max_age_s {
            c.ranges.max_age_s = v;
        }
        if let Some(v) = &self.cache_dir {
            c.ranges.cache_dir = v.clone();
        }
        if self.no_builtin_range_urls {
            c.ranges.builtin_urls = false;
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

/// Environment variables read under the sidecar's former name (`crawlguard-verifier`, before
/// it also became the fleet's Redis client): each is used when its new name is unset.
const RENAMED_ENV: [(&str, &str); 2] = [
    ("CRAWLGUARD_VERIFIER_CONFIG", "CRAWLGUARD_SIDECAR_CONFIG"),
    ("CRAWLGUARD_VERIFIER_REDIS", "CRAWLGUARD_SIDECAR_REDIS"),
];

fn main() -> anyhow::Result<()> {
    // Before any thread starts (set_var is only sound single-threaded).
    let mut renamed = Vec::new();
    for (old, new) in RENAMED_ENV {
        if let (Some(v), None) = (std::env::var_os(old), std::env::var_os(new)) {
            // Sound only here: no other thread exists yet (edition 2024 makes this `unsafe`).
            std::env::set_var(new, v);
            renamed.push((old, new));
        }
    }
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
    for (old, new) in renamed {
        tracing::warn!("{old} is read as {new} (its former name); rename it");
    }

    let loaded = (|| -> anyhow::Result<_> {
        let mut config = match &cli.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        cli.apply(&mut config);
        config.validate().context("invalid configuration")?;
        let catalog = config.catalog()?;
        Ok((config, catalog))
    })();
    let (config, catalog) = match loaded {
        Ok(c) => c,
        // `--check-config` gives one verdict line, as for its range files.
        Err(e) if cli.check_config => {
            eprintln!("configuration invalid: {e:#}");
            std::process::exit(1);
        }
        Err(e) => return Err(e),
    };
    let sources: std::collections::BTreeSet<RangeSource> = catalog
        .values()
        .flat_map(|m| m.ranges.iter().cloned())
        .collect();
    let ranges = Arc::new(RangeStore::new(sources));
    let metrics = Arc::new(Metrics::new());
    let max_age = Duration::from_secs(config.ranges.max_age_s);
    {
        let (store, max_age) = (ranges.clone(), max_age);
        metrics.on_scrape(move |m| update_source_gauges(&store, max_age, m));
    }
    let initial = ranges.refresh_files();
    report_refresh(&initial, &metrics);
    let urls = ranges.urls();
    let fetcher = match urls.is_empty() {
        true => None,
        false => Some(Arc::new(
            Fetcher::new(FetchSettings {
                timeout: Duration::from_millis(config.ranges.fetch_timeout_ms),
                max_body_bytes: config.ranges.max_body_bytes,
                cache_dir: config.ranges.cache_dir().map(PathBuf::from),
            })
            .map_err(|e| anyhow::anyhow!("setting up the HTTP client for range URLs: {e}"))?,
        )),
    };
    // The last good copies first: with no network, they are what the sidecar verifies with.
    let mut unusable_caches = Vec::new();
    for url in fetcher
        .iter()
        .flat_map(|f| urls.iter().map(move |u| (f, u)))
    {
        let (fetcher, url) = url;
        match fetcher.load_cache(&ranges, url) {
            CacheOutcome::Loaded { prefixes, age } => tracing::info!(
                source = url.as_str(),
                prefixes,
                age_s = age.as_secs(),
                "range source loaded from the cache"
            ),
            CacheOutcome::Missing => {}
            CacheOutcome::Failed(error) => {
                tracing::warn!(
                    source = url.as_str(),
                    error,
                    "cached range source not usable"
                );
                unusable_caches.push((url.clone(), error));
            }
        }
    }
    report_staleness(&ranges, max_age);

    if cli.check_config {
        let verdict = check_verdict(catalog.len(), urls.len(), &initial, &unusable_caches);
        if verdict.ok {
            print!("{}", verdict.text);
        } else {
            eprint!("{}", verdict.text);
        }
        std::process::exit(i32::from(!verdict.ok));
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(config, catalog, ranges, fetcher, metrics))
}
