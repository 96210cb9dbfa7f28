//! The bot catalog, filter side: [`BotEntry`], the shape the matcher compiles and the `bots`
//! configuration uses, and [`builtin_catalog`], the built-in entries read from the one
//! catalog data file, `contract/catalog/bots.json` (crate `crawlguard-contract`), which the
//! verifier sidecar and the README tables are derived from too.

use crate::class::Class;
use crawlguard_contract::catalog::{builtin_match_rules, CatalogError, MatchRule};
use serde::{Deserialize, Serialize};

/// One catalog entry: a bot id, the UA tokens that identify it, its class and whether its
/// operator publishes a way to verify it (FCrDNS or IP ranges).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BotEntry {
    /// Stable lowercase id, e.g. `googlebot`; sent to the verifier as `bot=`.
    pub id: String,
    /// Case-insensitive substrings of the User-Agent; any one matching selects this entry.
    pub ua_contains: Vec<String>,
    /// Class given when the claim is accepted.
    pub class: Class,
    /// Whether the claim must be verified before the class is granted.
    #[serde(default)]
    pub verify: bool,
}

impl From<MatchRule> for BotEntry {
    fn from(r: MatchRule) -> BotEntry {
        BotEntry {
            id: r.id,
            ua_contains: r.ua_contains,
            class: r.class.into(),
            verify: r.verify,
        }
    }
}

/// The built-in catalog, in match order (specific tokens first; the generic `script` and
/// `declared-bot` rules last).
///
/// `verify: true` exactly for bots whose operator documents forward-confirmed reverse DNS or
/// a published IP list, and a crawler class only with `verify: true`; the data file names the
/// vendor's document per bot. Parsed on every call (configuration time only); validated by
/// the contract crate's tests, not here. It fails only if the embedded file is not the
/// documented shape, which the tests of this module and of the contract crate rule out for
/// every build that passed them.
pub fn builtin_catalog() -> Result<Vec<BotEntry>, CatalogError> {
    Ok(builtin_match_rules()?
        .into_iter()
        .map(BotEntry::from)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin() -> Vec<BotEntry> {
        builtin_catalog().expect("the embedded catalog loads")
    }

    #[test]
    fn the_embedded_catalog_loads_in_file_order() {
        let cat = builtin();
        assert_eq!(cat.len(), 161);
        let ids: Vec<&str> = cat.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(
            ids[..3],
            ["googlebot-image", "googlebot-video", "googlebot-news"]
        );
        assert_eq!(ids[ids.len() - 2..], ["script", "declared-bot"]);
        let g = cat.iter().find(|e| e.id == "googlebot");
        assert_eq!(
            g,
            Some(&BotEntry {
                id: "googlebot".into(),
                ua_contains: vec!["googlebot".into()],
                class: Class::SearchCrawler,
                verify: true,
            })
        );
        let m = cat.iter().find(|e| e.id == "mediapartners-google");
        assert_eq!(
            m.map(|e| e.ua_contains.clone()),
            Some(vec![
                "mediapartners-google".into(),
                "mediapartners (googlebot)".into()
            ])
        );
    }

    #[test]
    fn builtin_catalog_ids_are_unique_lowercase_and_tokens_nonblank() {
        let cat = builtin();
        let mut ids: Vec<&str> = cat.iter().map(|e| e.id.as_str()).collect();
        for id in &ids {
            assert_eq!(*id, id.to_ascii_lowercase());
        }
        ids.sort_unstable();
        let before = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), before, "duplicate ids");
        assert!(cat
            .iter()
            .all(|e| e.ua_contains.iter().all(|t| !t.trim().is_empty())));
    }

    #[test]
    fn crawler_classes_are_only_claimed_by_entries_that_verify() {
        for e in builtin() {
            assert!(!e.class.is_crawler() || e.verify, "{}", e.id);
            assert!(
                !matches!(e.class, Class::UnverifiedBot | Class::Spoofed),
                "{}",
                e.id
            );
        }
    }

    #[test]
    fn robots_only_tokens_are_not_catalog_entries() {
        let cat = builtin();
        assert!(!cat
            .iter()
            .any(|e| e.id == "applebot-extended" || e.id == "google-extended"));
    }
}
