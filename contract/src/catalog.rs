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
//!
//! By job: the data model and loading here, `validate` (the rules, [`Catalog::validate`],
//! [`is_range_url`]), `markdown` (the README's generated tables, [`begin_marker`],
//! [`end_marker`]).

mod browser_checks;
mod browser_signals;
mod markdown;
mod signed_agents;
mod validate;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

pub use browser_checks::{BrowserCheck, BrowserVersion, Signal, MAX_BROWSER_TOKENS};
pub use browser_signals::{is_public_asn, DatacenterAsn, LibraryTlsFingerprint};
pub use markdown::{begin_marker, end_marker};
pub use signed_agents::{is_agent_origin, SignedAgent, DIRECTORY_PATH, MAX_ORIGIN_LEN};
pub use validate::is_range_url;

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
    /// Stable id ([`is_valid_bot_id`](crate::bot_id::is_valid_bot_id)); sent to the verifier as `bot=`.
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
    /// Id of the bot that holds the generic bot markers (`declared-bot`): its tokens do not
    /// count inside the platform section of an otherwise browser-shaped User-Agent, where
    /// they are device names ("CUBOT", "M bot 54", "MagentaTV", "Spider 8").
    pub generic_markers_id: String,
    /// The generic markers that count inside the platform section too: a product token
    /// (`bot/`), a crawler's name, a web address or a contact. Each is a token of the
    /// `generic_markers_id` bot.
    pub markers_in_platform_section: Vec<String>,
    /// Key into [`Catalog::sources`].
    pub source: String,
    /// What the rule says and where the vocabulary comes from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
}

impl HumanRule {
    /// The token lists by name, as in the data file, in a fixed order.
    pub fn lists(&self) -> [(&'static str, &[String]); 6] {
        [
            ("platform_section_after", &self.platform_section_after),
            ("device_platforms", &self.device_platforms),
            ("desktop_platforms", &self.desktop_platforms),
            ("browser_tokens", &self.browser_tokens),
            ("browser_forms", &self.browser_forms),
            (
                "markers_in_platform_section",
                &self.markers_in_platform_section,
            ),
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
    /// What a current browser always sends: a `human` request without it is
    /// `suspect_browser`.
    #[serde(default)]
    pub browser_checks: Vec<BrowserCheck>,
    /// HTTP libraries' TLS stacks: a browser User-Agent over one of them fails the
    /// `tls_fingerprint` signal.
    #[serde(default)]
    pub library_tls_fingerprints: Vec<LibraryTlsFingerprint>,
    /// Hosting and cloud networks, ascending: a browser User-Agent from one of them fails
    /// the `network` signal.
    #[serde(default)]
    pub datacenter_asns: Vec<DatacenterAsn>,
    /// The bots, in match order.
    pub bots: Vec<Bot>,
    /// Agents that sign their requests (Web Bot Auth): a verified signature gives the
    /// agent's class and bot id, whatever the User-Agent says.
    #[serde(default)]
    pub signed_agents: Vec<SignedAgent>,
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

    /// The document `bot` cites.
    pub fn source_of(&self, bot: &Bot) -> Option<&Source> {
        self.sources.get(&bot.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud_zones::cloud_customer_zone;

    pub(super) fn builtin() -> Catalog {
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
            372
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
            "bot/", "crawl", "spider", "scan", "http://", ".com/", ".com)", "mailto:", "feed",
        ] {
            assert!(tokens("declared-bot").iter().any(|x| x == t), "{t}");
        }
        // A bare ".com" would match an app's bundle id ("[air.com.A888poker/1.0]").
        assert!(!tokens("declared-bot").iter().any(|x| x == ".com"));
        assert_eq!(h.generic_markers_id, "declared-bot");
        for t in &h.markers_in_platform_section {
            assert!(tokens("declared-bot").contains(t), "{t}");
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
}
