//! The built-in bot catalog: one data file, `catalog/bots.json` (see `catalog/README.md`),
//! embedded at build time and read by everyone who needs it.
//!
//! - the filter matches User-Agents with [`Bot::ua_contains`] in file order (first match wins)
//!   and gives [`Bot::class`], once verified when [`Bot::verify`] is set (`build.rs` compiles
//!   just those fields into the module); a User-Agent no entry matches is `human` only when
//!   it is browser-shaped by the [`HumanRule`] ([`Catalog::human`]), else a bot;
//! - the sidecar verifies every `verify: true` bot by its [`Bot::fcrdns_domains`] and by the
//!   vendor's published IP-range documents, fetched from [`Bot::range_urls`] (or the
//!   operator's own sources);
//! - the README's catalog tables are rendered from it ([`Catalog::markdown_bot_table`],
//!   [`Catalog::markdown_verification_table`], [`Catalog::markdown_human_rule`]) and a test
//!   keeps them equal.
//!
//! [`Catalog::parse`] checks every rule the rest of the project relies on
//! ([`Catalog::validate`]), so a bad edit of the file fails a test, never a request.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::fmt;

use crate::bot_id::is_valid_bot_id;
use crate::cloud_zones::cloud_customer_zone;

/// The catalog data file, as embedded at build time.
pub const BOTS_JSON: &str = include_str!("../catalog/bots.json");

/// Longest User-Agent token, in bytes (the filter's configuration uses the same bound).
pub const MAX_TOKEN_LEN: usize = 256;

/// The class a catalog entry claims. Only these five: `unverified_bot` and `spoofed` are
/// assigned by verification, never by the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BotClass {
    /// A search-engine crawler.
    SearchCrawler,
    /// Fetches a page because a user asked an AI assistant right now.
    AiRetriever,
    /// Crawls for model training.
    AiTrainer,
    /// SEO, monitoring, previews and other declared bots.
    OtherBot,
    /// HTTP libraries and command-line tools.
    Script,
}

impl BotClass {
    /// The snake_case name, as in the data file and the filter's configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            BotClass::SearchCrawler => "search_crawler",
            BotClass::AiRetriever => "ai_retriever",
            BotClass::AiTrainer => "ai_trainer",
            BotClass::OtherBot => "other_bot",
            BotClass::Script => "script",
        }
    }

    /// True for the crawler classes, which are only ever given to a verified claim.
    pub fn is_crawler(self) -> bool {
        matches!(
            self,
            BotClass::SearchCrawler | BotClass::AiRetriever | BotClass::AiTrainer
        )
    }
}

/// A document a catalog entry comes from: the vendor's own page where one exists (always for
/// `verify: true`), otherwise the public list the entry was taken from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// The document's title (and publisher).
    pub name: String,
    /// Where it is.
    pub url: String,
}

/// One bot of the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bot {
    /// Stable id ([`is_valid_bot_id`]); sent to the verifier as `bot=`.
    pub id: String,
    /// Lowercase substrings of the User-Agent, any one of which selects this bot (case is
    /// ignored when matching). Entries are matched in file order, so specific tokens come
    /// before the generic ones they contain.
    pub ua_contains: Vec<String>,
    /// The class the bot gets (once verified, when `verify` is set).
    pub class: BotClass,
    /// Whether the vendor publishes a way to verify the bot (FCrDNS or an IP list); the
    /// filter then asks the sidecar before granting the class.
    pub verify: bool,
    /// FCrDNS domains: a PTR name must equal one or end with `.` + one, and resolve back.
    /// Empty when the vendor documents no reverse-DNS method.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fcrdns_domains: Vec<String>,
    /// Where the vendor publishes the bot's IP ranges (`https://` addresses of documents in
    /// the common `{"prefixes": [{"ipv4Prefix": ..}, {"ipv6Prefix": ..}]}` format); the
    /// sidecar fetches them and keeps them fresh. Empty when the vendor publishes no document.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub range_urls: Vec<String>,
    /// Key into [`Catalog::sources`].
    pub source: String,
    /// Why the entry looks the way it does, where that is not obvious.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
}

/// Who is `human`: the rule for a User-Agent that no catalog entry matches.
///
/// Such a User-Agent is `human` only when it is *browser-shaped*:
///
/// 1. it contains one of [`HumanRule::browser_forms`] anywhere (feature-phone and legacy
///    mobile browsers, TV browsers, Apple devices' own HTTP stack); or
/// 2. its *platform section* names a personal device ([`HumanRule::device_platforms`]); or
/// 3. its platform section names a desktop system ([`HumanRule::desktop_platforms`]) and it
///    contains a browser engine or product token ([`HumanRule::browser_tokens`]).
///
/// The platform section is the first parenthesised comment of the User-Agent, and the first
/// one after the first occurrence of any of [`HumanRule::platform_section_after`]
/// (`mozilla/`): from the `(` to the next `)`, or to the end. Otherwise it is a bot: class
/// [`HumanRule::non_browser_class`], bot id [`HumanRule::non_browser_id`]. All tokens are
/// lowercase substrings matched ASCII case-insensitively. Generic bot markers are catalog
/// entries (`declared-bot`, matched before this rule), so they count inside a browser-shaped
/// User-Agent too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanRule {
    /// Bot id given to a User-Agent that is neither a catalog bot nor browser-shaped.
    pub non_browser_id: String,
    /// Its class: `other_bot` or `script` (never a crawler class: nothing was verified).
    pub non_browser_class: BotClass,
    /// The platform section is also looked for after the first occurrence of any of these.
    pub platform_section_after: Vec<String>,
    /// Phones, tablets, consoles and televisions: enough on their own in the platform section.
    pub device_platforms: Vec<String>,
    /// Desktop operating systems: in the platform section, together with a browser token.
    pub desktop_platforms: Vec<String>,
    /// Browser engines and products (anywhere in the User-Agent).
    pub browser_tokens: Vec<String>,
    /// Browser forms that need no platform section (anywhere in the User-Agent).
    pub browser_forms: Vec<String>,
    /// Key into [`Catalog::sources`].
    pub source: String,
    /// What the rule says and where the vocabulary comes from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
}

impl HumanRule {
    /// The token lists by name, as in the data file, in a fixed order.
    pub fn lists(&self) -> [(&'static str, &[String]); 5] {
        [
            ("platform_section_after", &self.platform_section_after),
            ("device_platforms", &self.device_platforms),
            ("desktop_platforms", &self.desktop_platforms),
            ("browser_tokens", &self.browser_tokens),
            ("browser_forms", &self.browser_forms),
        ]
    }
}

/// The whole data file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Catalog {
    /// The documents entries cite, by key.
    pub sources: BTreeMap<String, Source>,
    /// Who is `human`, for User-Agents no bot matches.
    pub human: HumanRule,
    /// The bots, in match order.
    pub bots: Vec<Bot>,
}

/// Why a catalog was refused: the entry and field, and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogError(pub String);

impl fmt::Display for CatalogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CatalogError {}

impl Catalog {
    /// The built-in catalog ([`BOTS_JSON`]), parsed and validated. A test proves it loads.
    pub fn builtin() -> Result<Catalog, CatalogError> {
        Catalog::parse(BOTS_JSON)
    }

    /// Parses a catalog document and [validates](Catalog::validate) it.
    pub fn parse(json: &str) -> Result<Catalog, CatalogError> {
        let catalog: Catalog =
            serde_json::from_str(json).map_err(|e| CatalogError(format!("bots.json: {e}")))?;
        catalog.validate()?;
        Ok(catalog)
    }

    /// Checks the rules the filter and the sidecar rely on:
    ///
    /// - ids are valid bot ids and unique;
    /// - every bot has tokens; tokens are lowercase, not blank, at most [`MAX_TOKEN_LEN`]
    ///   bytes, and no token appears twice in the catalog (a second one could never match);
    /// - a crawler class only with `verify: true` (anyone can copy a User-Agent);
    /// - `fcrdns_domains` and `range_urls` only with `verify: true`; domains are lowercase
    ///   host names, never in or above a cloud-customer reverse zone
    ///   ([`crate::cloud_zones`]), range URLs plain `https://` addresses;
    /// - the human rule: every list non-empty, tokens lowercase, not blank, at most
    ///   [`MAX_TOKEN_LEN`] bytes and unique within their list; the non-browser id a valid bot
    ///   id no bot has; the non-browser class `other_bot` or `script`;
    /// - every bot and the human rule cite a known source, every source is cited and has an
    ///   http(s) URL.
    pub fn validate(&self) -> Result<(), CatalogError> {
        let mut ids = HashSet::new();
        let mut tokens = HashSet::new();
        let mut cited = HashSet::new();
        for (i, b) in self.bots.iter().enumerate() {
            let err = |field: &str, why: String| {
                Err(CatalogError(format!("bots[{i}] ({}).{field}: {why}", b.id)))
            };
            if !is_valid_bot_id(&b.id) {
                return err("id", "must be 1..=64 bytes of [a-z0-9._-]".into());
            }
            if !ids.insert(b.id.as_str()) {
                return err("id", "duplicate id".into());
            }
            if b.ua_contains.is_empty() {
                return err("ua_contains", "must not be empty".into());
            }
            for t in &b.ua_contains {
                if t.trim().is_empty() || t.len() > MAX_TOKEN_LEN {
                    return err("ua_contains", format!("{t:?} is blank or too long"));
                }
                if *t != t.to_ascii_lowercase() {
                    return err("ua_contains", format!("{t:?} is not lowercase"));
                }
                if !tokens.insert(t.as_str()) {
                    return err("ua_contains", format!("{t:?} is already an earlier token"));
                }
            }
            if b.class.is_crawler() && !b.verify {
                return err("class", format!("{} needs verify: true", b.class.as_str()));
            }
            let has_methods = !b.fcrdns_domains.is_empty() || !b.range_urls.is_empty();
            if has_methods && !b.verify {
                return err(
                    "verify",
                    "fcrdns_domains and range_urls need verify: true".into(),
                );
            }
            if let Some(d) = b.fcrdns_domains.iter().find(|d| !is_domain(d)) {
                return err(
                    "fcrdns_domains",
                    format!("{d:?} is not a lowercase host name"),
                );
            }
            if let Some((d, z)) = b
                .fcrdns_domains
                .iter()
                .find_map(|d| cloud_customer_zone(d).map(|z| (d, z)))
            {
                return err(
                    "fcrdns_domains",
                    format!(
                        "{d:?} is no proof: it is in or contains {}, under which anyone can \
                         rent a machine ({})",
                        z.zone, z.provider
                    ),
                );
            }
            if let Some(u) = b.range_urls.iter().find(|u| !is_range_url(u)) {
                return err("range_urls", format!("{u:?} is not a plain https:// URL"));
            }
            if !self.sources.contains_key(&b.source) {
                return err("source", format!("{:?} is not in sources", b.source));
            }
            cited.insert(b.source.as_str());
        }
        self.validate_human(&ids)?;
        cited.insert(self.human.source.as_str());
        for (key, s) in &self.sources {
            if !cited.contains(key.as_str()) {
                return Err(CatalogError(format!("sources.{key}: cited by no bot")));
            }
            if s.name.trim().is_empty()
                || !(s.url.starts_with("https://") || s.url.starts_with("http://"))
            {
                return Err(CatalogError(format!(
                    "sources.{key}: needs a name and an http(s) url"
                )));
            }
        }
        Ok(())
    }

    /// The human rule's part of [`Catalog::validate`]; `ids` are the bots' ids.
    fn validate_human(&self, ids: &HashSet<&str>) -> Result<(), CatalogError> {
        let h = &self.human;
        let err = |field: &str, why: String| Err(CatalogError(format!("human.{field}: {why}")));
        if !is_valid_bot_id(&h.non_browser_id) {
            return err(
                "non_browser_id",
                "must be 1..=64 bytes of [a-z0-9._-]".into(),
            );
        }
        if ids.contains(h.non_browser_id.as_str()) {
            return err("non_browser_id", "is the id of a bot".into());
        }
        if !matches!(h.non_browser_class, BotClass::OtherBot | BotClass::Script) {
            return err(
                "non_browser_class",
                format!(
                    "{} is not other_bot or script",
                    h.non_browser_class.as_str()
                ),
            );
        }
        for (name, list) in h.lists() {
            if list.is_empty() {
                return err(name, "must not be empty".into());
            }
            let mut seen = HashSet::new();
            for t in list {
                if t.trim().is_empty() || t.len() > MAX_TOKEN_LEN {
                    return err(name, format!("{t:?} is blank or too long"));
                }
                if *t != t.to_ascii_lowercase() {
                    return err(name, format!("{t:?} is not lowercase"));
                }
                if !seen.insert(t.as_str()) {
                    return err(name, format!("{t:?} is listed twice"));
                }
            }
        }
        if !self.sources.contains_key(&h.source) {
            return err("source", format!("{:?} is not in sources", h.source));
        }
        Ok(())
    }

    /// The document `bot` cites.
    pub fn source_of(&self, bot: &Bot) -> Option<&Source> {
        self.sources.get(&bot.source)
    }

    /// The README's catalog table: `| id | class | verify | User-Agent tokens |`, one row per
    /// bot in match order, at most six tokens shown (then `...`).
    pub fn markdown_bot_table(&self) -> String {
        let mut out =
            String::from("| id | class | verify | User-Agent tokens |\n|---|---|---|---|\n");
        for b in &self.bots {
            let mut tokens = code_list(b.ua_contains.iter().take(6));
            if b.ua_contains.len() > 6 {
                tokens.push_str(", ...");
            }
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                code(&b.id),
                b.class.as_str(),
                if b.verify { "yes" } else { "no" },
                tokens
            ));
        }
        out
    }

    /// The README's verification table: how each `verify: true` bot is checked,
    /// `| id | FCrDNS domains | published ranges | source |`, in match order; each range URL
    /// is a link named by its file name.
    pub fn markdown_verification_table(&self) -> String {
        let mut out = String::from(
            "| id | FCrDNS domains | published ranges | source |\n|---|---|---|---|\n",
        );
        for b in self.bots.iter().filter(|b| b.verify) {
            let source = self.source_of(b).map_or(String::new(), |s| {
                format!("[{}]({})", cell(&s.name), cell(&s.url))
            });
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                code(&b.id),
                code_list(b.fcrdns_domains.iter()),
                b.range_urls
                    .iter()
                    .map(|u| format!("[{}]({})", cell(url_file_name(u)), cell(u)))
                    .collect::<Vec<_>>()
                    .join(", "),
                source
            ));
        }
        out
    }
}

impl Catalog {
    /// The README's table of the human rule and the generic rules: every token of every list
    /// of [`HumanRule`], then every token of the `declared-bot` (generic bot markers) and
    /// `script` entries, `| rule | tokens |`.
    pub fn markdown_human_rule(&self) -> String {
        let h = &self.human;
        let mut out = String::from("| rule | tokens |\n|---|---|\n");
        let mut row = |rule: &str, tokens: &[String]| {
            out.push_str(&format!("| {rule} | {} |\n", code_list(tokens.iter())));
        };
        row(
            "browser forms: `human` wherever they occur",
            &h.browser_forms,
        );
        row(
            "device platforms: `human` in the platform section",
            &h.device_platforms,
        );
        row(
            "desktop platforms: `human` in the platform section, with a browser token",
            &h.desktop_platforms,
        );
        row("browser tokens (engines and products)", &h.browser_tokens);
        row(
            "the platform section is also looked for after",
            &h.platform_section_after,
        );
        for (id, rule) in [
            (
                "declared-bot",
                "generic bot markers (`declared-bot`, other_bot), even in a browser-shaped UA",
            ),
            (
                "script",
                "libraries, tools, headless and automation browsers (`script`)",
            ),
        ] {
            if let Some(b) = self.bots.iter().find(|b| b.id == id) {
                row(rule, &b.ua_contains);
            }
        }
        out
    }

    /// The README's generated blocks, `(name, block)`: each table between its two marker
    /// lines, `<!-- BEGIN <name>: generated from contract/catalog/bots.json -->` and
    /// `<!-- END <name> -->`.
    pub fn readme_blocks(&self) -> [(&'static str, String); 3] {
        let block = |name: &str, table: String| {
            format!("{}\n{table}{}", begin_marker(name), end_marker(name))
        };
        [
            ("bot table", block("bot table", self.markdown_bot_table())),
            (
                "verification table",
                block("verification table", self.markdown_verification_table()),
            ),
            (
                "human rule",
                block("human rule", self.markdown_human_rule()),
            ),
        ]
    }
}

/// The line that opens a generated README block.
pub fn begin_marker(name: &str) -> String {
    format!("<!-- BEGIN {name}: generated from contract/catalog/bots.json -->")
}

/// The line that closes a generated README block.
pub fn end_marker(name: &str) -> String {
    format!("<!-- END {name} -->")
}

/// `text` as a Markdown code span inside a table cell.
fn code(text: &str) -> String {
    let text = cell(text);
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

/// Code spans joined by `, `.
fn code_list<'a>(items: impl Iterator<Item = &'a String>) -> String {
    items.map(|s| code(s)).collect::<Vec<_>>().join(", ")
}

/// `text` safe inside a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// A lowercase DNS host name of at least two labels: labels of 1..=63 bytes of `[a-z0-9-]`,
/// not starting or ending with `-`, 253 bytes at most.
fn is_domain(d: &str) -> bool {
    d.len() <= 253
        && d.split('.').count() >= 2
        && d.split('.').all(|l| {
            (1..=63).contains(&l.len())
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// A plain `https://` address: at most 256 bytes of printable ASCII without spaces, quotes,
/// angle brackets, backslashes or a fragment, with a lowercase host name and a path.
pub fn is_range_url(u: &str) -> bool {
    let Some(rest) = u.strip_prefix("https://") else {
        return false;
    };
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    u.len() <= 256
        && u.bytes()
            .all(|b| b.is_ascii_graphic() && !b"\"'<>\\#`".contains(&b))
        && is_domain(host)
        && path.len() > 1
}

/// The last path segment of a URL (the published file's name).
fn url_file_name(u: &str) -> &str {
    u.rsplit('/').next().unwrap_or(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin() -> Catalog {
        match Catalog::builtin() {
            Ok(c) => c,
            Err(e) => panic!("the embedded catalog does not load: {e}"),
        }
    }

    fn bot<'a>(c: &'a Catalog, id: &str) -> &'a Bot {
        match c.bots.iter().find(|b| b.id == id) {
            Some(b) => b,
            None => panic!("no bot {id}"),
        }
    }

    #[test]
    fn the_embedded_file_parses_and_validates() {
        let c = builtin();
        assert_eq!(c.bots.len(), 161);
        assert_eq!(c.bots.iter().filter(|b| b.verify).count(), 56);
        assert_eq!(
            c.bots.iter().map(|b| b.ua_contains.len()).sum::<usize>(),
            356
        );
        assert_eq!(
            c.bots.iter().filter(|b| !b.range_urls.is_empty()).count(),
            33
        );
    }

    #[test]
    fn the_human_rule_is_data() {
        let h = builtin().human;
        assert_eq!(
            (h.non_browser_id.as_str(), h.non_browser_class),
            ("non-browser", BotClass::OtherBot)
        );
        assert_eq!(h.platform_section_after, ["mozilla/"]);
        let has = |list: &[String], t: &str| list.iter().any(|x| x == t);
        assert!(has(&h.device_platforms, "iphone") && has(&h.device_platforms, "android"));
        assert!(has(&h.desktop_platforms, "windows") && has(&h.desktop_platforms, "x11"));
        assert!(has(&h.browser_tokens, "applewebkit") && has(&h.browser_tokens, "gecko"));
        assert!(has(&h.browser_forms, "opera mini") && has(&h.browser_forms, "cfnetwork/"));
        assert_eq!(
            builtin().sources[&h.source].url,
            "https://www.rfc-editor.org/rfc/rfc9110#name-user-agent"
        );
        // Headless and automation browsers are script; generic markers are declared-bot.
        let c = builtin();
        let tokens = |id: &str| bot(&c, id).ua_contains.clone();
        for t in [
            "headless",
            "puppeteer",
            "playwright",
            "selenium",
            "webdriver",
            "cypress/",
        ] {
            assert!(tokens("script").iter().any(|x| x == t), "{t}");
        }
        assert_eq!(bot(&c, "lighthouse").class, BotClass::Script);
        for t in [
            "bot/", "crawl", "spider", "scan", "http://", ".com", "mailto:", "feed",
        ] {
            assert!(tokens("declared-bot").iter().any(|x| x == t), "{t}");
        }
    }

    #[test]
    fn specific_entries_come_first_and_the_generic_rules_last() {
        let c = builtin();
        let ids: Vec<&str> = c.bots.iter().map(|b| b.id.as_str()).collect();
        assert_eq!(ids.first(), Some(&"googlebot-image"));
        assert_eq!(ids[ids.len() - 2..], ["script", "declared-bot"]);
        let pos = |id: &str| ids.iter().position(|i| *i == id);
        for (specific, generic) in [
            ("googlebot-image", "googlebot"),
            ("adsbot-google", "googlebot"),
            ("mediapartners-google", "googlebot"),
            ("googlebot", "google-other-agent"),
            ("oai-searchbot", "gptbot"),
            ("perplexity-user", "perplexitybot"),
            ("bingpreview", "bingbot"),
            ("yandexadditional", "yandexbot"),
            ("yandexbot", "yandex"),
        ] {
            assert!(pos(specific) < pos(generic), "{specific} before {generic}");
        }
        assert_eq!(bot(&c, "script").class, BotClass::Script);
        assert_eq!(bot(&c, "declared-bot").class, BotClass::OtherBot);
    }

    #[test]
    fn no_builtin_verification_domain_is_a_cloud_customer_zone() {
        // Checked apart from `validate`, so the data file fails here even if the rule were
        // dropped from it: a domain anyone can rent a machine under is never proof.
        let c = builtin();
        let cloud: Vec<String> = c
            .bots
            .iter()
            .flat_map(|b| b.fcrdns_domains.iter().map(move |d| (b, d)))
            .filter_map(|(b, d)| {
                cloud_customer_zone(d).map(|z| format!("{}: {d} ({})", b.id, z.zone))
            })
            .collect();
        assert_eq!(cloud, Vec::<String>::new());
        let domains: usize = c.bots.iter().map(|b| b.fcrdns_domains.len()).sum();
        assert_eq!(domains, 44, "domains checked");
    }

    #[test]
    fn key_bots_have_their_documented_methods() {
        let c = builtin();
        let g = bot(&c, "googlebot");
        assert_eq!(
            (g.class, g.verify, g.ua_contains.clone()),
            (BotClass::SearchCrawler, true, vec!["googlebot".to_string()])
        );
        // Google's three groups, as its crawler lists document their reverse names: common
        // crawlers googlebot.com, special-case crawlers and fetchers google.com; never
        // googleusercontent.com, the reverse zone of every Google Cloud VM.
        let google: Vec<&Bot> = c
            .bots
            .iter()
            .filter(|b| b.source.starts_with("google-"))
            .collect();
        assert_eq!(google.len(), 18);
        for b in google {
            let want: &[&str] = match b.source.as_str() {
                "google-common-crawlers" => &["googlebot.com"],
                "google-special-case-crawlers" | "google-user-triggered-fetchers" => {
                    &["google.com"]
                }
                other => panic!("{}: unexpected source {other}", b.id),
            };
            assert_eq!(b.fcrdns_domains, want, "{}", b.id);
        }
        assert_eq!(g.source, "google-common-crawlers");
        assert_eq!(
            bot(&c, "adsbot-google").source,
            "google-special-case-crawlers"
        );
        assert_eq!(
            bot(&c, "feedfetcher-google").source,
            "google-user-triggered-fetchers"
        );
        const G: &str = "https://developers.google.com/static/crawling/ipranges/";
        assert_eq!(g.range_urls, [format!("{G}common-crawlers.json")]);
        assert_eq!(
            bot(&c, "adsbot-google").range_urls,
            [format!("{G}special-crawlers.json")]
        );
        assert_eq!(
            bot(&c, "feedfetcher-google").range_urls,
            // Not user-triggered-fetchers.json: user-owned fetchers, App Engine apps.
            [format!("{G}user-triggered-fetchers-google.json")]
        );
        assert!(bot(&c, "google-favicon").range_urls.is_empty());
        assert_eq!(bot(&c, "bingbot").fcrdns_domains, ["search.msn.com"]);
        assert_eq!(
            bot(&c, "bingbot").range_urls,
            ["https://www.bing.com/toolbox/bingbot.json"]
        );
        assert_eq!(
            bot(&c, "gptbot").range_urls,
            ["https://openai.com/gptbot.json"]
        );
        assert_eq!(
            bot(&c, "perplexitybot").range_urls,
            ["https://www.perplexity.com/perplexitybot.json"]
        );
        assert_eq!(
            bot(&c, "applebot").range_urls,
            ["https://search.developer.apple.com/applebot.json"]
        );
        assert_eq!(
            bot(&c, "duckduckbot").range_urls,
            ["https://duckduckgo.com/duckduckbot.json"]
        );
        assert_eq!(
            bot(&c, "ccbot").range_urls,
            ["https://index.commoncrawl.org/ccbot.json"]
        );
        assert!(bot(&c, "gptbot").fcrdns_domains.is_empty());
        assert_eq!(
            bot(&c, "amazonbot").fcrdns_domains,
            ["crawl.amazonbot.amazon"]
        );
        assert_eq!(
            c.source_of(g).map(|s| s.url.as_str()),
            Some("https://developers.google.com/crawling/docs/crawlers-fetchers/google-common-crawlers")
        );
        let m = bot(&c, "mojeekbot");
        assert_eq!((m.class, m.verify), (BotClass::OtherBot, false));
    }

    #[test]
    fn crawler_classes_only_with_verify() {
        for b in &builtin().bots {
            assert!(!b.class.is_crawler() || b.verify, "{}", b.id);
        }
    }

    /// A minimal valid human rule citing source `s`.
    const HUMAN: &str = r#""human":{"non_browser_id":"nb","non_browser_class":"other_bot",
        "platform_section_after":["mozilla/"],"device_platforms":["iphone"],
        "desktop_platforms":["windows"],"browser_tokens":["gecko"],"browser_forms":["netfront"],
        "source":"s"}"#;

    fn one_bot(fields: &str) -> String {
        format!(
            r#"{{"sources":{{"s":{{"name":"S","url":"https://s.example"}}}},
                "bots":[{{"id":"x","ua_contains":["x"],"class":"other_bot","verify":false,"source":"s"{fields}}}],
                {HUMAN}}}"#
        )
    }

    fn refused(json: &str) -> String {
        match Catalog::parse(json) {
            Ok(_) => panic!("accepted: {json}"),
            Err(e) => e.0,
        }
    }

    #[test]
    fn every_rule_is_enforced_with_the_field_named() {
        assert!(Catalog::parse(&one_bot("")).is_ok());
        let bad = |from: &str, to: &str| refused(&one_bot("").replacen(from, to, 1));
        assert_eq!(
            bad(r#""id":"x""#, r#""id":"X""#),
            "bots[0] (X).id: must be 1..=64 bytes of [a-z0-9._-]"
        );
        assert_eq!(
            bad(r#"["x"]"#, "[]"),
            "bots[0] (x).ua_contains: must not be empty"
        );
        assert_eq!(
            bad(r#"["x"]"#, r#"["X"]"#),
            "bots[0] (x).ua_contains: \"X\" is not lowercase"
        );
        assert_eq!(
            bad(r#"["x"]"#, r#"[" "]"#),
            "bots[0] (x).ua_contains: \" \" is blank or too long"
        );
        assert_eq!(
            bad(r#"["x"]"#, r#"["x","x"]"#),
            "bots[0] (x).ua_contains: \"x\" is already an earlier token"
        );
        assert_eq!(
            bad("other_bot", "ai_trainer"),
            "bots[0] (x).class: ai_trainer needs verify: true"
        );
        assert!(bad("other_bot", "spoofed").starts_with("bots.json: unknown variant `spoofed`"));
        assert_eq!(
            refused(&one_bot(r#","fcrdns_domains":["x.example"]"#)),
            "bots[0] (x).verify: fcrdns_domains and range_urls need verify: true"
        );
        let verified = |f: &str| one_bot(f).replace("false", "true");
        assert!(Catalog::parse(&verified(
            r#","fcrdns_domains":["x.example"],"range_urls":["https://x.example/x.json"]"#
        ))
        .is_ok());
        assert_eq!(
            refused(&verified(r#","fcrdns_domains":["X.example"]"#)),
            "bots[0] (x).fcrdns_domains: \"X.example\" is not a lowercase host name"
        );
        assert_eq!(
            refused(&verified(
                r#","fcrdns_domains":["x.example","googleusercontent.com"]"#
            )),
            "bots[0] (x).fcrdns_domains: \"googleusercontent.com\" is no proof: it is in or \
             contains googleusercontent.com, under which anyone can rent a machine (Google \
             Cloud (Compute Engine VMs: <ip>.bc.googleusercontent.com; App Engine: \
             *.gae.googleusercontent.com))"
        );
        assert!(refused(&verified(
            r#","fcrdns_domains":["compute-1.amazonaws.com"]"#
        ))
        .contains("it is in or contains amazonaws.com, under which"));
        assert_eq!(
            refused(&verified(r#","range_urls":["http://x.example/x.json"]"#)),
            "bots[0] (x).range_urls: \"http://x.example/x.json\" is not a plain https:// URL"
        );
        assert_eq!(
            bad(r#""source":"s""#, r#""source":"t""#),
            "bots[0] (x).source: \"t\" is not in sources"
        );
        assert_eq!(
            bad(r#""url":"https://s.example""#, r#""url":"s.example""#),
            "sources.s: needs a name and an http(s) url"
        );
        assert!(refused(&one_bot(r#","domains":[]"#)).contains("unknown field `domains`"));
    }

    #[test]
    fn the_human_rule_is_validated_with_the_field_named() {
        let bad = |from: &str, to: &str| refused(&one_bot("").replacen(from, to, 1));
        assert_eq!(
            bad(r#""non_browser_id":"nb""#, r#""non_browser_id":"N B""#),
            "human.non_browser_id: must be 1..=64 bytes of [a-z0-9._-]"
        );
        assert_eq!(
            bad(r#""non_browser_id":"nb""#, r#""non_browser_id":"x""#),
            "human.non_browser_id: is the id of a bot"
        );
        assert_eq!(
            bad(
                r#""non_browser_class":"other_bot""#,
                r#""non_browser_class":"search_crawler""#
            ),
            "human.non_browser_class: search_crawler is not other_bot or script"
        );
        assert_eq!(
            bad(r#"["iphone"]"#, "[]"),
            "human.device_platforms: must not be empty"
        );
        assert_eq!(
            bad(r#"["windows"]"#, r#"["Windows"]"#),
            "human.desktop_platforms: \"Windows\" is not lowercase"
        );
        assert_eq!(
            bad(r#"["gecko"]"#, r#"["gecko","gecko"]"#),
            "human.browser_tokens: \"gecko\" is listed twice"
        );
        assert_eq!(
            bad(r#"["netfront"]"#, r#"["  "]"#),
            "human.browser_forms: \"  \" is blank or too long"
        );
        assert_eq!(
            bad(r#""source":"s"}}"#, r#""source":"t"}}"#),
            "human.source: \"t\" is not in sources"
        );
        assert!(bad(r#""human":{"#, r#""human":{"extra":1,"#).contains("unknown field `extra`"));
    }

    #[test]
    fn a_second_bot_with_the_same_id_is_refused() {
        let json = one_bot("").replace(
            r#""source":"s"}]"#,
            r#""source":"s"},{"id":"x","ua_contains":["y"],"class":"other_bot","verify":false,"source":"s"}]"#,
        );
        assert_eq!(refused(&json), "bots[1] (x).id: duplicate id");
    }

    #[test]
    fn tables_render_rows_in_match_order() {
        let c = builtin();
        let table = c.markdown_bot_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2 + 161);
        assert_eq!(
            lines[2],
            "| `googlebot-image` | search_crawler | yes | `googlebot-image` |"
        );
        assert!(lines.contains(&"| `sogou` | other_bot | no | `sogou web spider`, `sogou news spider`, `sogou pic spider`, `sogou video spider`, `sogou inst spider`, `sogou orion spider`, ... |"));
        let table = c.markdown_verification_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2 + 56);
        assert!(lines.contains(&"| `gptbot` |  | [gptbot.json](https://openai.com/gptbot.json) | [Overview of OpenAI Crawlers](https://platform.openai.com/docs/bots) |"));
        let table = c.markdown_human_rule();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2 + 7);
        assert!(lines[2].starts_with(
            "| browser forms: `human` wherever they occur | `profile/midp-`, `netfront`, "
        ));
        assert!(lines[7].starts_with("| generic bot markers (`declared-bot`, other_bot), even in a browser-shaped UA | `bot/`, "));
        assert!(lines[8].ends_with("`wkhtmlto`, `ptst/` |"));
    }

    #[test]
    fn domain_and_file_name_rules() {
        for d in ["googlebot.com", "crawl.amazonbot.amazon", "a-1.b.example"] {
            assert!(is_domain(d), "{d}");
        }
        for d in [
            "com", "", "-a.com", "a-.com", "a..com", "a.com.", "A.com", "*.a.com",
        ] {
            assert!(!is_domain(d), "{d}");
        }
        for u in [
            "https://openai.com/gptbot.json",
            "https://developers.google.com/static/crawling/ipranges/common-crawlers.json",
            "https://x.example/list?format=json",
        ] {
            assert!(is_range_url(u), "{u}");
        }
        for u in [
            "http://openai.com/gptbot.json",
            "https://openai.com",
            "https://openai.com/",
            "https://Openai.com/a.json",
            "https://openai.com/a b.json",
            "https://openai.com/a.json#x",
            "https://user@openai.com/a.json",
            "gptbot.json",
        ] {
            assert!(!is_range_url(u), "{u}");
        }
        assert_eq!(
            url_file_name("https://openai.com/gptbot.json"),
            "gptbot.json"
        );
    }
}
