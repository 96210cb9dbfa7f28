//! The built-in catalog: which verification methods each bot id supports.
//!
//! Derived from the one catalog data file, `contract/catalog/bots.json` (crate
//! `crawlguard-contract`), which the filter reads too: every bot the filter sends to the
//! verifier (`verify: true`) with the FCrDNS domains and the URLs of the IP-range documents
//! its vendor publishes (`range_urls`). The URLs are fetched and kept fresh by
//! [`crate::fetch`] unless the configuration says otherwise (`ranges.builtin_urls`, or a
//! bot's own `ranges`).

use std::sync::OnceLock;

use crawlguard_contract::catalog::{Catalog, CatalogError};

/// One built-in bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltinBot {
    /// Bot id as the filter sends it (`bot=` query parameter).
    pub id: String,
    /// FCrDNS domains (label-boundary suffixes). Empty: the vendor documents no rDNS method.
    pub domains: Vec<String>,
    /// Where the vendor publishes the bot's IP ranges (`https://`). Empty: no document.
    pub range_urls: Vec<String>,
}

/// Every built-in bot, in the catalog's order: the `verify: true` bots of the data file.
///
/// Parsed and validated once; an error means the embedded data file is broken (the contract
/// crate's tests rule that out for every build that passed them).
pub fn builtin_bots() -> Result<&'static [BuiltinBot], CatalogError> {
    static BUILTIN: OnceLock<Result<Vec<BuiltinBot>, CatalogError>> = OnceLock::new();
    BUILTIN
        .get_or_init(|| {
            Ok(Catalog::builtin()?
                .bots
                .into_iter()
                .filter(|b| b.verify)
                .map(|b| BuiltinBot {
                    id: b.id,
                    domains: b.fcrdns_domains,
                    range_urls: b.range_urls,
                })
                .collect())
        })
        .as_ref()
        .map(Vec::as_slice)
        .map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn bots() -> &'static [BuiltinBot] {
        builtin_bots().expect("the embedded catalog loads")
    }

    fn domains(id: &str) -> Vec<&str> {
        let b = bots().iter().find(|b| b.id == id);
        b.map(|b| b.domains.iter().map(String::as_str).collect())
            .unwrap_or_default()
    }

    #[test]
    fn catalog_has_every_verifiable_bot_exactly_once() {
        let ids: Vec<&str> = bots().iter().map(|b| b.id.as_str()).collect();
        let unique: HashSet<&str> = ids.iter().copied().collect();
        assert_eq!(unique.len(), ids.len(), "duplicate ids in catalog");
        assert_eq!(ids.len(), 56);
        for id in [
            "googlebot",
            "adsbot-google",
            "bingbot",
            "gptbot",
            "claudebot",
            "perplexitybot",
            "duckduckbot",
            "meta-externalagent",
            "applebot",
            "ahrefsbot",
            "uptimerobot",
            "pinterestbot",
        ] {
            assert!(unique.contains(id), "{id}");
        }
        // Bots without a published method are not the verifier's business.
        for id in ["mojeekbot", "bytespider", "script", "declared-bot"] {
            assert!(!unique.contains(id), "{id}");
        }
    }

    #[test]
    fn catalog_ids_and_domains_are_well_formed() {
        for b in bots() {
            assert!(
                crawlguard_contract::bot_id::is_valid_bot_id(&b.id),
                "{}",
                b.id
            );
            for d in &b.domains {
                assert!(crate::domain::is_valid_domain(d), "{}: {d}", b.id);
                assert_eq!(*d, d.to_ascii_lowercase());
            }
        }
    }

    #[test]
    fn domains_of_key_bots() {
        assert_eq!(domains("googlebot"), ["googlebot.com"]);
        assert_eq!(domains("adsbot-google"), ["google.com"]);
        assert_eq!(domains("feedfetcher-google"), ["google.com"]);
        assert_eq!(domains("bingbot"), ["search.msn.com"]);
        assert_eq!(domains("baiduspider"), ["baidu.com", "baidu.jp"]);
        assert_eq!(
            domains("yandexbot"),
            ["yandex.ru", "yandex.net", "yandex.com"]
        );
        assert_eq!(domains("applebot"), ["applebot.apple.com"]);
        assert_eq!(domains("ccbot"), ["crawl.commoncrawl.org"]);
        assert_eq!(domains("amazonbot"), ["crawl.amazonbot.amazon"]);
        assert_eq!(domains("petalbot"), ["petalsearch.com", "aspiegel.com"]);
        assert!(domains("gptbot").is_empty());
        assert!(domains("perplexitybot").is_empty());
        assert!(domains("duckduckbot").is_empty());
    }

    #[test]
    fn range_urls_of_key_bots() {
        let urls = |id: &str| -> Vec<&str> {
            bots()
                .iter()
                .find(|b| b.id == id)
                .map(|b| b.range_urls.iter().map(String::as_str).collect())
                .unwrap_or_default()
        };
        assert_eq!(urls("gptbot"), ["https://openai.com/gptbot.json"]);
        assert_eq!(
            urls("applebot"),
            ["https://search.developer.apple.com/applebot.json"]
        );
        assert!(urls("amazonbot").is_empty());
        assert_eq!(
            bots().iter().filter(|b| !b.range_urls.is_empty()).count(),
            33
        );
    }
}
