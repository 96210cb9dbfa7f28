//! The verifier's configuration file (TOML), its defaults and its validation.
//!
//! Every field has a default, so an empty file (or no file) gives a working service with the
//! built-in catalog. Unknown fields are errors: a typo must fail at startup, naming the field,
//! rather than be silently ignored. Command-line flags override the file (see `main.rs`).

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::catalog::builtin_bots;
use crate::domain::{is_valid_domain, normalize_name};
use crate::ranges::RangeSource;
use crawlguard_contract::bot_id::is_valid_bot_id;
use crawlguard_contract::cloud_zones::cloud_customer_zone;

/// The whole configuration document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the HTTP API listens on. Port 0 picks a free port (printed on stdout).
    pub listen: SocketAddr,
    /// DNS resolution settings.
    pub dns: DnsConfig,
    /// Verdict cache settings.
    pub cache: CacheConfig,
    /// Fleet mode: the Redis store shared by every sidecar of a fleet (off without a URL).
    pub redis: RedisConfig,
    /// How long each verdict may be cached, by the sidecar and by the filter (`ttl_s`).
    pub ttl: TtlConfig,
    /// Range sources: file reloading, URL fetching, cache, staleness.
    pub ranges: RangesConfig,
    /// `merge`: `[[bots]]` entries override/extend the built-in catalog by id.
    /// `replace`: only the `[[bots]]` entries exist.
    pub bots_mode: BotsMode,
    /// Per-bot verification methods.
    pub bots: Vec<BotConfig>,
    /// Signed agents (Web Bot Auth): allowed origins, directory fetching, signature window.
    pub agents: crate::agents::AgentsConfig,
}

/// DNS resolution settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DnsConfig {
    /// Nameservers as `ip:port` (UDP, TCP on truncation). Empty: the system's resolv.conf.
    pub nameservers: Vec<SocketAddr>,
    /// Timeout of one DNS query attempt, in milliseconds.
    pub timeout_ms: u64,
    /// Attempts per DNS query (1 = no retry).
    pub attempts: usize,
    /// At most this many verifications resolve DNS at once; more wait, up to one query
    /// timeout, then answer 503 (no verdict: the filter keeps a stale one).
    pub max_concurrent_lookups: usize,
    /// At most this many PTR names of one address are forward-checked (a hostile reverse
    /// zone can return hundreds).
    pub max_ptr_names: usize,
}

/// Verdict cache settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Maximum number of cached (ip, bot) verdicts; least recently used go first.
    pub max_entries: u64,
}

/// Fleet mode: the Redis store shared by the sidecars of one fleet (bucket sync at
/// `POST /v1/fleet/sync`, shared FCrDNS verdicts). Without `url` fleet mode is off: the sync
/// endpoint answers 503 and verification works alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// `redis://[user:password@]host[:port][/db]`, `rediss://...` (TLS) or
    /// `unix:///path/to/redis.sock`. Absent: fleet mode off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Bound on connecting and on every Redis command, in milliseconds: a sync or a verdict
    /// lookup that takes longer fails (503 / falls back to DNS).
    pub timeout_ms: u64,
    /// Prefix of every key this service writes (`<prefix>bucket:<key>`,
    /// `<prefix>verdict:<bot>:<ip>`, `<prefix>replicas`): 1..=64 chars of
    /// `[A-Za-z0-9:._{}-]` (`{...}` makes it a Redis Cluster hash tag).
    pub prefix: String,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: None,
            timeout_ms: 200,
            prefix: "crawlguard:".into(),
        }
    }
}

impl RedisConfig {
    /// Checks the three fields; the error names the first bad one and never repeats the URL
    /// (it may carry a password).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(url) = &self.url {
            crate::redis_store::check_url(url)
                .map_err(|reason| ConfigError(format!("redis.url: {reason}")))?;
        }
        if self.timeout_ms == 0 || self.timeout_ms > 60_000 {
            return Err(ConfigError(format!(
                "redis.timeout_ms: must be 1..=60000, got {}",
                self.timeout_ms
            )));
        }
        let p = &self.prefix;
        if p.is_empty()
            || p.len() > 64
            || !p
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b":._{}-".contains(&b))
        {
            return Err(ConfigError(format!(
                "redis.prefix: must be 1..=64 chars of [A-Za-z0-9:._{{}}-], got {p:?}"
            )));
        }
        Ok(())
    }
}

/// Verdict lifetimes in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TtlConfig {
    /// Lifetime of a `verified` verdict.
    pub verified_s: u64,
    /// Lifetime of a `spoofed` verdict.
    pub spoofed_s: u64,
    /// Lifetime of an `unknown` verdict (kept short: the cause is usually transient).
    pub unknown_s: u64,
}

/// Range sources: local files are re-read when they change, URLs are fetched on start and
/// every `refresh_interval_s`, and the last good copy of every URL is kept in `cache_dir`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RangesConfig {
    /// How often range files are checked for changes (mtime and size), in seconds.
    pub reload_interval_s: u64,
    /// How often URL sources are fetched (conditional GET), in seconds; each fetch is moved
    /// by up to ±10% at random.
    pub refresh_interval_s: u64,
    /// After a failed fetch the next one comes after this many seconds, doubling per further
    /// failure up to `refresh_interval_s`.
    pub retry_interval_s: u64,
    /// A source whose data was last confirmed current longer ago than this is stale: a log
    /// line and `range_source_stale`, and its ranges stay in use.
    pub max_age_s: u64,
    /// Limit for one fetch (connect, TLS, headers, body), in milliseconds.
    pub fetch_timeout_ms: u64,
    /// Largest range document accepted, in bytes.
    pub max_body_bytes: u64,
    /// Directory for the last good copy of every URL source (created if missing); used at
    /// start, before the first fetch. Empty: no disk copy.
    pub cache_dir: PathBuf,
    /// Bots whose `[[bots]] ranges` are not configured use the vendor URLs of the built-in
    /// catalog. `false`: only configured sources (no network for ranges unless configured).
    pub builtin_urls: bool,
}

/// How `[[bots]]` combine with the built-in catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BotsMode {
    /// Entries override built-in entries with the same id field by field and add new ids.
    #[default]
    Merge,
    /// Only the configured entries exist.
    Replace,
}

/// One bot's verification methods in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BotConfig {
    /// Bot id as the filter sends it: lower-case ASCII letters, digits, `-`, `_`, `.`.
    pub id: String,
    /// FCrDNS domains; absent in merge mode keeps the built-in list, `[]` disables FCrDNS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domains: Option<Vec<String>>,
    /// Range sources (vendor JSON format): `http(s)://` URLs or file paths; absent in merge
    /// mode keeps the built-in URLs, `[]` turns ranges off for that bot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges: Option<Vec<String>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:9090".parse().expect("valid literal"),
            dns: DnsConfig::default(),
            cache: CacheConfig::default(),
            redis: RedisConfig::default(),
            ttl: TtlConfig::default(),
            ranges: RangesConfig::default(),
            bots_mode: BotsMode::Merge,
            bots: Vec::new(),
            agents: crate::agents::AgentsConfig::default(),
        }
    }
}

impl Default for DnsConfig {
    fn default() -> Self {
        DnsConfig {
            nameservers: Vec::new(),
            timeout_ms: 1000,
            attempts: 2,
            max_concurrent_lookups: 256,
            max_ptr_names: 8,
        }
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_entries: 100_000,
        }
    }
}

impl Default for TtlConfig {
    fn default() -> Self {
        TtlConfig {
            verified_s: 86_400,
            spoofed_s: 3_600,
            unknown_s: 30,
        }
    }
}

impl Default for RangesConfig {
    fn default() -> Self {
        RangesConfig {
            reload_interval_s: 30,
            refresh_interval_s: 21_600,
            retry_interval_s: 60,
            max_age_s: 259_200,
            fetch_timeout_ms: 10_000,
            max_body_bytes: 4 * 1024 * 1024,
            cache_dir: PathBuf::from("/var/cache/crawlguard-sidecar"),
            builtin_urls: true,
        }
    }
}

impl RangesConfig {
    /// The cache directory, `None` when turned off (empty).
    pub fn cache_dir(&self) -> Option<&Path> {
        (!self.cache_dir.as_os_str().is_empty()).then_some(self.cache_dir.as_path())
    }
}

/// One bot's methods after merging with the built-in catalog.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BotMethods {
    /// FCrDNS domains, normalised (lower case, no trailing dot).
    pub domains: Vec<String>,
    /// Range sources (files and URLs).
    pub ranges: Vec<RangeSource>,
}

impl BotMethods {
    /// True when the bot has neither domains nor range sources.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty() && self.ranges.is_empty()
    }
}

/// A configuration error, naming the field.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Parses a TOML document (no validation; see [`Config::validate`]).
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError(e.to_string()))
    }

    /// Reads and parses a TOML file. Relative range-file paths and a relative `cache_dir` are
    /// resolved against the file's directory, so a config and its files can move together.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        let mut config = Config::from_toml(&text)
            .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        if let Some(base) = path.parent() {
            for bot in &mut config.bots {
                for r in bot.ranges.iter_mut().flatten() {
                    if let RangeSource::File(p) = RangeSource::parse(r) {
                        if p.is_relative() {
                            *r = base.join(p).display().to_string();
                        }
                    }
                }
            }
            let cache = &mut config.ranges.cache_dir;
            if !cache.as_os_str().is_empty() && cache.is_relative() {
                *cache = base.join(&*cache);
            }
        }
        Ok(config)
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError(m));
        if self.dns.timeout_ms == 0 || self.dns.timeout_ms > 60_000 {
            return err(format!(
                "dns.timeout_ms: must be 1..=60000, got {}",
                self.dns.timeout_ms
            ));
        }
        if self.dns.attempts == 0 || self.dns.attempts > 10 {
            return err(format!(
                "dns.attempts: must be 1..=10, got {}",
                self.dns.attempts
            ));
        }
        if self.dns.max_concurrent_lookups == 0 {
            return err("dns.max_concurrent_lookups: must be at least 1".into());
        }
        if self.dns.max_ptr_names == 0 {
            return err("dns.max_ptr_names: must be at least 1".into());
        }
        if self.cache.max_entries == 0 {
            return err("cache.max_entries: must be at least 1".into());
        }
        self.redis.validate()?;
        self.agents.validate().map_err(ConfigError)?;
        for (name, v) in [
            ("ttl.verified_s", self.ttl.verified_s),
            ("ttl.spoofed_s", self.ttl.spoofed_s),
            ("ttl.unknown_s", self.ttl.unknown_s),
        ] {
            if v == 0 || v > 30 * 86_400 {
                return err(format!("{name}: must be 1..=2592000, got {v}"));
            }
        }
        let r = &self.ranges;
        for (name, v, max) in [
            ("ranges.reload_interval_s", r.reload_interval_s, 86_400),
            (
                "ranges.refresh_interval_s",
                r.refresh_interval_s,
                30 * 86_400,
            ),
            ("ranges.retry_interval_s", r.retry_interval_s, 86_400),
            ("ranges.max_age_s", r.max_age_s, 365 * 86_400),
            ("ranges.fetch_timeout_ms", r.fetch_timeout_ms, 600_000),
            ("ranges.max_body_bytes", r.max_body_bytes, 256 * 1024 * 1024),
        ] {
            if v == 0 || v > max {
                return err(format!("{name}: must be 1..={max}, got {v}"));
            }
        }
        let mut seen = HashSet::new();
        for (i, bot) in self.bots.iter().enumerate() {
            if !is_valid_bot_id(&bot.id) {
                return err(format!(
                    "bots[{i}].id: {:?} is not 1-64 characters of [a-z0-9._-]",
                    bot.id
                ));
            }
            if !seen.insert(bot.id.as_str()) {
                return err(format!("bots[{i}].id: duplicate id {:?}", bot.id));
            }
            for (j, d) in bot.domains.iter().flatten().enumerate() {
                if !is_valid_domain(d) {
                    return err(format!("bots[{i}].domains[{j}]: invalid domain {d:?}"));
                }
                if let Some(z) = cloud_customer_zone(&normalize_name(d)) {
                    return err(format!(
                        "bots[{i}].domains[{j}]: {d:?} is no proof: it is in or contains {}, \
                         under which anyone can rent a machine ({})",
                        z.zone, z.provider
                    ));
                }
            }
            for (j, r) in bot.ranges.iter().flatten().enumerate() {
                match RangeSource::parse(r) {
                    RangeSource::File(p) if p.as_os_str().is_empty() => {
                        return err(format!("bots[{i}].ranges[{j}]: empty path"));
                    }
                    RangeSource::File(_) => {}
                    RangeSource::Url(u) => {
                        if let Err(why) = check_url(&u) {
                            return err(format!("bots[{i}].ranges[{j}]: {u:?}: {why}"));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The effective catalog: built-in entries merged with (or replaced by) `[[bots]]`.
    /// Fails only if the embedded catalog data file does not load (see [`builtin_bots`]).
    pub fn catalog(&self) -> Result<BTreeMap<String, BotMethods>, ConfigError> {
        let mut catalog = BTreeMap::new();
        if self.bots_mode == BotsMode::Merge {
            for b in builtin_bots().map_err(builtin_error)? {
                let ranges = match self.ranges.builtin_urls {
                    true => b.range_urls.iter().cloned().map(RangeSource::Url).collect(),
                    false => Vec::new(),
                };
                catalog.insert(
                    b.id.clone(),
                    BotMethods {
                        domains: b.domains.clone(),
                        ranges,
                    },
                );
            }
        }
        for bot in &self.bots {
            let entry = catalog.entry(bot.id.clone()).or_default();
            if let Some(domains) = &bot.domains {
                entry.domains = domains
                    .iter()
                    .map(|d| {
                        let d = normalize_name(d);
                        d.strip_prefix('.').map(str::to_string).unwrap_or(d)
                    })
                    .collect();
            }
            if let Some(ranges) = &bot.ranges {
                entry.ranges = ranges.iter().map(|r| RangeSource::parse(r)).collect();
            }
        }
        Ok(catalog)
    }

    /// The default configuration with the built-in catalog spelled out, as TOML: a starting
    /// point for operators (`--print-default-config`).
    pub fn default_toml() -> Result<String, ConfigError> {
        let mut config = Config {
            bots_mode: BotsMode::Replace,
            ..Config::default()
        };
        config.bots = builtin_bots()
            .map_err(builtin_error)?
            .iter()
            .map(|b| BotConfig {
                id: b.id.clone(),
                domains: Some(b.domains.clone()),
                ranges: Some(b.range_urls.clone()),
            })
            .collect();
        let body = toml::to_string_pretty(&config).unwrap_or_else(|e| format!("# error: {e}\n"));
        Ok(format!(
            "# crawlguard-sidecar default configuration (built-in catalog spelled out).\n\
             # bots_mode = \"replace\" here because every bot is listed; see README.md.\n{body}"
        ))
    }
}

/// Checks a range-source URL: `http` or `https`, a host, no credentials, no fragment.
fn check_url(text: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(text).map_err(|e| e.to_string())?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("scheme must be http or https".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("credentials in a URL are not supported".into());
    }
    if url.fragment().is_some() {
        return Err("a fragment is not allowed".into());
    }
    Ok(())
}

/// A broken embedded catalog, as a configuration error.
fn builtin_error(e: crawlguard_contract::catalog::CatalogError) -> ConfigError {
    ConfigError(format!(
        "built-in catalog (contract/catalog/bots.json): {e}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_document_is_the_default() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c, Config::default());
        c.validate().unwrap();
        assert_eq!(c.catalog().unwrap().len(), builtin_bots().unwrap().len());
    }

    #[test]
    fn unknown_fields_are_rejected_with_their_name() {
        let e = Config::from_toml("[dns]\ntimeout=5\n").unwrap_err();
        assert!(e.0.contains("timeout"), "{e}");
        let e = Config::from_toml("[[bots]]\nid='x'\ndomain=['a.com']\n").unwrap_err();
        assert!(e.0.contains("domain"), "{e}");
    }

    #[test]
    fn validation_names_the_field() {
        let mut c = Config::default();
        c.dns.timeout_ms = 0;
        assert!(c.validate().unwrap_err().0.starts_with("dns.timeout_ms"));
        let c = Config::from_toml("[[bots]]\nid='Bad Id'\n").unwrap();
        assert!(c.validate().unwrap_err().0.starts_with("bots[0].id"));
        let c = Config::from_toml("[[bots]]\nid='a'\n[[bots]]\nid='a'\n").unwrap();
        assert!(c.validate().unwrap_err().0.contains("duplicate"));
        let c = Config::from_toml("[[bots]]\nid='a'\ndomains=['*.x.com']\n").unwrap();
        assert!(c
            .validate()
            .unwrap_err()
            .0
            .starts_with("bots[0].domains[0]"));
        // A cloud provider's customer zone, or a parent of one, would verify rented VMs.
        for (domains, zone) in [
            (
                "['googlebot.com', 'bc.googleusercontent.com']",
                "googleusercontent.com",
            ),
            ("['Compute-1.AmazonAWS.com.']", "amazonaws.com"),
            ("['com']", "googleusercontent.com"),
        ] {
            let c = Config::from_toml(&format!("[[bots]]\nid='googlebot'\ndomains={domains}\n"))
                .unwrap();
            let e = c.validate().unwrap_err().0;
            assert!(e.starts_with("bots[0].domains["), "{e}");
            assert!(
                e.contains(&format!("it is in or contains {zone}, under which")),
                "{e}"
            );
        }
        let c = Config::from_toml("[ttl]\nunknown_s=0\n").unwrap();
        assert!(c.validate().unwrap_err().0.starts_with("ttl.unknown_s"));
    }

    #[test]
    fn redis_section_is_validated_without_echoing_the_url() {
        let c = Config::from_toml(
            "[redis]\nurl='redis://:pw@10.0.0.5:6380/1'\ntimeout_ms=150\nprefix='{cg}:'\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.redis.url.as_deref(), Some("redis://:pw@10.0.0.5:6380/1"));
        assert_eq!(
            (c.redis.timeout_ms, c.redis.prefix.as_str()),
            (150, "{cg}:")
        );
        assert_eq!(Config::default().redis.timeout_ms, 200);
        assert_eq!(Config::default().redis.prefix, "crawlguard:");
        assert_eq!(Config::default().redis.url, None);
        for (doc, field) in [
            ("[redis]\nurl='http://:pw@x'\n", "redis.url"),
            ("[redis]\nurl='pw@x:6379'\n", "redis.url"),
            ("[redis]\ntimeout_ms=0\n", "redis.timeout_ms"),
            ("[redis]\ntimeout_ms=60001\n", "redis.timeout_ms"),
            ("[redis]\nprefix=''\n", "redis.prefix"),
            ("[redis]\nprefix='a b'\n", "redis.prefix"),
        ] {
            let e = Config::from_toml(doc).unwrap().validate().unwrap_err().0;
            assert!(e.starts_with(field), "{doc}: {e}");
            assert!(!e.contains("pw"), "{doc}: {e}");
        }
        let e = Config::from_toml("[redis]\nuri='redis://x'\n").unwrap_err();
        assert!(e.0.contains("uri"), "{e}");
    }

    #[test]
    fn merge_overrides_field_by_field() {
        let c = Config::from_toml(
            "[[bots]]\nid='googlebot'\nranges=['/r/googlebot.json', 'https://mirror.example/g.json']\n\
             [[bots]]\nid='bingbot'\ndomains=['Search.MSN.com.']\n\
             [[bots]]\nid='acmebot'\ndomains=['acme.example']\n",
        )
        .unwrap();
        c.validate().unwrap();
        let cat = c.catalog().unwrap();
        assert_eq!(cat.len(), builtin_bots().unwrap().len() + 1);
        assert_eq!(
            cat["googlebot"],
            BotMethods {
                domains: vec!["googlebot.com".into()],
                ranges: vec![
                    RangeSource::File(PathBuf::from("/r/googlebot.json")),
                    RangeSource::Url("https://mirror.example/g.json".into())
                ],
            }
        );
        assert_eq!(cat["bingbot"].domains, vec!["search.msn.com".to_string()]);
        // Not overridden: the built-in vendor URL.
        assert_eq!(
            cat["bingbot"].ranges,
            vec![RangeSource::Url(
                "https://www.bing.com/toolbox/bingbot.json".into()
            )]
        );
        assert_eq!(cat["acmebot"].domains, vec!["acme.example".to_string()]);
        assert!(cat["acmebot"].ranges.is_empty());
    }

    #[test]
    fn the_built_in_catalog_fetches_the_vendors_urls_unless_told_not_to() {
        let cat = Config::default().catalog().unwrap();
        assert_eq!(
            cat["gptbot"].ranges,
            vec![RangeSource::Url("https://openai.com/gptbot.json".into())]
        );
        assert_eq!(
            cat["googlebot"].ranges,
            vec![RangeSource::Url(
                "https://developers.google.com/static/crawling/ipranges/common-crawlers.json"
                    .into()
            )]
        );
        let urls: std::collections::BTreeSet<&RangeSource> =
            cat.values().flat_map(|m| m.ranges.iter()).collect();
        assert_eq!(
            urls.len(),
            14,
            "user-triggered-fetchers.json is no longer one"
        );
        assert!(urls.iter().all(|s| s.is_url()));
        let off = Config::from_toml("[ranges]\nbuiltin_urls = false\n").unwrap();
        let cat = off.catalog().unwrap();
        assert!(cat.values().all(|m| m.ranges.is_empty()));
        assert!(!cat["googlebot"].domains.is_empty());
    }

    #[test]
    fn range_settings_are_validated() {
        for (toml, field) in [
            (
                "[ranges]\nrefresh_interval_s = 0\n",
                "ranges.refresh_interval_s",
            ),
            (
                "[ranges]\nretry_interval_s = 0\n",
                "ranges.retry_interval_s",
            ),
            ("[ranges]\nmax_age_s = 0\n", "ranges.max_age_s"),
            (
                "[ranges]\nfetch_timeout_ms = 0\n",
                "ranges.fetch_timeout_ms",
            ),
            ("[ranges]\nmax_body_bytes = 0\n", "ranges.max_body_bytes"),
            (
                "[ranges]\nreload_interval_s = 0\n",
                "ranges.reload_interval_s",
            ),
        ] {
            let e = Config::from_toml(toml).unwrap().validate().unwrap_err();
            assert!(e.0.starts_with(field), "{e}");
        }
        for (url, why) in [
            ("https://", "empty host"),
            ("https://u:p@x.example/r.json", "credentials"),
            ("https://x.example/r.json#f", "fragment"),
        ] {
            let c = Config::from_toml(&format!("[[bots]]\nid='a'\nranges=['{url}']\n")).unwrap();
            let e = c.validate().unwrap_err();
            assert!(e.0.starts_with("bots[0].ranges[0]"), "{e}");
            assert!(e.0.contains(why), "{url}: {e}");
        }
        let d = RangesConfig::default();
        assert_eq!(
            (d.refresh_interval_s, d.retry_interval_s, d.max_age_s),
            (21_600, 60, 259_200)
        );
        assert_eq!(
            d.cache_dir(),
            Some(Path::new("/var/cache/crawlguard-sidecar"))
        );
        let none = Config::from_toml("[ranges]\ncache_dir = ''\n").unwrap();
        assert_eq!(none.ranges.cache_dir(), None);
    }

    #[test]
    fn replace_keeps_only_configured_bots() {
        let c = Config::from_toml(
            "bots_mode='replace'\n[[bots]]\nid='acmebot'\ndomains=['acme.example']\n",
        )
        .unwrap();
        let cat = c.catalog().unwrap();
        assert_eq!(cat.keys().collect::<Vec<_>>(), vec!["acmebot"]);
    }

    #[test]
    fn relative_range_paths_follow_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.toml");
        std::fs::write(
            &path,
            "[ranges]\ncache_dir='cache'\n\
             [[bots]]\nid='gptbot'\nranges=['ranges/gptbot.json','/abs.json','https://x.example/g.json']\n",
        )
        .unwrap();
        let c = Config::load(&path).unwrap();
        assert_eq!(
            c.catalog().unwrap()["gptbot"].ranges,
            vec![
                RangeSource::File(dir.path().join("ranges/gptbot.json")),
                RangeSource::File(PathBuf::from("/abs.json")),
                RangeSource::Url("https://x.example/g.json".into()),
            ]
        );
        assert_eq!(
            c.ranges.cache_dir(),
            Some(dir.path().join("cache").as_path())
        );
    }

    #[test]
    fn default_toml_round_trips() {
        let text = Config::default_toml().unwrap();
        let c = Config::from_toml(&text).unwrap();
        c.validate().unwrap();
        let builtin = Config::default().catalog().unwrap();
        assert_eq!(c.catalog().unwrap(), builtin);
    }

    #[test]
    fn example_file_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sidecar.example.toml");
        let c = Config::load(&path).unwrap();
        c.validate().unwrap();
        let catalog = c.catalog().unwrap();
        assert!(!catalog["gptbot"].ranges.is_empty());
        // `make run` needs no network: file sources only, every one of them loads.
        let sources: std::collections::BTreeSet<RangeSource> = catalog
            .values()
            .flat_map(|m| m.ranges.iter().cloned())
            .collect();
        assert_eq!(sources.len(), 7);
        assert!(sources.iter().all(|s| !s.is_url()), "{sources:?}");
        let store = crate::ranges::RangeStore::new(sources);
        for (path, outcome) in store.refresh_files() {
            assert!(
                matches!(outcome, crate::ranges::RefreshOutcome::Loaded { .. }),
                "{}: {outcome:?}",
                path.display()
            );
        }
    }
}
