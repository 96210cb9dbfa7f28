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
use crawlguard_contract::bot_id::is_valid_bot_id;

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
    /// Range-file reloading.
    pub ranges: RangesConfig,
    /// `merge`: `[[bots]]` entries override/extend the built-in catalog by id.
    /// `replace`: only the `[[bots]]` entries exist.
    pub bots_mode: BotsMode,
    /// Per-bot verification methods.
    pub bots: Vec<BotConfig>,
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
    /// timeout, then answer `unknown`.
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

/// Range-file reloading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RangesConfig {
    /// How often range files are checked for changes (mtime and size), in seconds.
    pub reload_interval_s: u64,
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
    /// Range files (vendor JSON format); absent in merge mode keeps the built-in (none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranges: Option<Vec<PathBuf>>,
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
        }
    }
}

/// One bot's methods after merging with the built-in catalog.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BotMethods {
    /// FCrDNS domains, normalised (lower case, no trailing dot).
    pub domains: Vec<String>,
    /// Range files.
    pub ranges: Vec<PathBuf>,
}

impl BotMethods {
    /// True when the bot has neither domains nor range files.
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

    /// Reads and parses a TOML file. Relative range paths are resolved against the file's
    /// directory, so a config and its range files can move together.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        let mut config = Config::from_toml(&text)
            .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        if let Some(base) = path.parent() {
            for bot in &mut config.bots {
                for r in bot.ranges.iter_mut().flatten() {
                    if r.is_relative() {
                        *r = base.join(&*r);
                    }
                }
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
        for (name, v) in [
            ("ttl.verified_s", self.ttl.verified_s),
            ("ttl.spoofed_s", self.ttl.spoofed_s),
            ("ttl.unknown_s", self.ttl.unknown_s),
        ] {
            if v == 0 || v > 30 * 86_400 {
                return err(format!("{name}: must be 1..=2592000, got {v}"));
            }
        }
        if self.ranges.reload_interval_s == 0 {
            return err("ranges.reload_interval_s: must be at least 1".into());
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
            }
            for (j, r) in bot.ranges.iter().flatten().enumerate() {
                if r.as_os_str().is_empty() {
                    return err(format!("bots[{i}].ranges[{j}]: empty path"));
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
                catalog.insert(
                    b.id.clone(),
                    BotMethods {
                        domains: b.domains.clone(),
                        ranges: Vec::new(),
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
                entry.ranges = ranges.clone();
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
                ranges: Some(Vec::new()),
            })
            .collect();
        let body = toml::to_string_pretty(&config).unwrap_or_else(|e| format!("# error: {e}\n"));
        Ok(format!(
            "# crawlguard-verifier default configuration (built-in catalog spelled out).\n\
             # bots_mode = \"replace\" here because every bot is listed; see README.md.\n{body}"
        ))
    }
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
            "[[bots]]\nid='googlebot'\nranges=['/r/googlebot.json']\n\
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
                domains: vec![
                    "googlebot.com".into(),
                    "google.com".into(),
                    "googleusercontent.com".into()
                ],
                ranges: vec![PathBuf::from("/r/googlebot.json")],
            }
        );
        assert_eq!(cat["bingbot"].domains, vec!["search.msn.com".to_string()]);
        assert_eq!(cat["acmebot"].domains, vec!["acme.example".to_string()]);
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
            "[[bots]]\nid='gptbot'\nranges=['ranges/gptbot.json','/abs.json']\n",
        )
        .unwrap();
        let c = Config::load(&path).unwrap();
        assert_eq!(
            c.catalog().unwrap()["gptbot"].ranges,
            vec![
                dir.path().join("ranges/gptbot.json"),
                PathBuf::from("/abs.json")
            ]
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
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("verifier.example.toml");
        let c = Config::load(&path).unwrap();
        c.validate().unwrap();
        let catalog = c.catalog().unwrap();
        assert!(!catalog["gptbot"].ranges.is_empty());
        // Every range file it names (copies in shared/data) loads.
        let paths: std::collections::BTreeSet<PathBuf> = catalog
            .values()
            .flat_map(|m| m.ranges.iter().cloned())
            .collect();
        assert_eq!(paths.len(), 7);
        let store = crate::ranges::RangeStore::new(paths);
        for (path, outcome) in store.refresh() {
            assert!(
                matches!(outcome, crate::ranges::RefreshOutcome::Loaded { .. }),
                "{}: {outcome:?}",
                path.display()
            );
        }
    }
}
