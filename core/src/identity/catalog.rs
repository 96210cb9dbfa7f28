//! The bot catalog, filter side: [`BotEntry`], the shape the matcher compiles and the `bots`
//! configuration uses; [`builtin_catalog`], the built-in entries; and [`builtin_human_rule`],
//! who is `human` when no entry matches. Both are read from the one catalog data file,
//! `contract/catalog/bots.json` (crate `crawlguard-contract`), which the verifier sidecar and
//! the README tables are derived from too.

use crate::identity::class::Class;
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

/// Who is `human`: the data file's `human` rule (`crawlguard_contract::catalog::HumanRule`
/// documents it), as static token lists.
///
/// A User-Agent no catalog entry matches is `human` only when it is browser-shaped: it
/// contains one of [`BuiltinHumanRule::browser_forms`]; or its platform section (the first
/// parenthesised comment, or the first one after the first of
/// [`BuiltinHumanRule::platform_section_after`]) contains one of [`BuiltinHumanRule::device_platforms`]; or
/// its platform section contains one of [`BuiltinHumanRule::desktop_platforms`] and the User-Agent one
/// of [`BuiltinHumanRule::browser_tokens`]. Otherwise it is [`BuiltinHumanRule::non_browser_class`] with the
/// bot id [`BuiltinHumanRule::non_browser_id`]. Tokens are lowercase, matched ASCII
/// case-insensitively.
#[derive(Debug)]
pub struct BuiltinHumanRule {
    /// Bot id of a User-Agent that is neither a catalog bot nor browser-shaped.
    pub non_browser_id: &'static str,
    /// Its class by default (`other_bot`); configurable (`non_browser_class`).
    pub non_browser_class: Class,
    /// The platform section is also looked for after the first of these (`mozilla/`).
    pub platform_section_after: &'static [&'static str],
    /// Phones, tablets, consoles, televisions: enough on their own in the platform section.
    pub device_platforms: &'static [&'static str],
    /// Desktop systems: in the platform section, together with a browser token.
    pub desktop_platforms: &'static [&'static str],
    /// Browser engines and products, anywhere in the User-Agent.
    pub browser_tokens: &'static [&'static str],
    /// Browser forms that are enough wherever they occur.
    pub browser_forms: &'static [&'static str],
    /// Id of the entry holding the generic bot markers: its tokens do not count inside the
    /// platform section of an otherwise browser-shaped User-Agent (device names there).
    pub generic_markers_id: &'static str,
    /// The generic markers that count inside the platform section too (a product token, a
    /// crawler's name, a web address, a contact).
    pub markers_in_platform_section: &'static [&'static str],
}

// `BUILTIN` and `HUMAN`, generated from the data file by build.rs.
include!(concat!(env!("OUT_DIR"), "/builtin_catalog.rs"));

/// The built-in human rule (validated with the data file when the filter is built).
pub fn builtin_human_rule() -> &'static BuiltinHumanRule {
    &HUMAN
}

/// The built-in catalog, in match order (specific tokens first; the generic `script` and
/// `declared-bot` rules last).
///
/// `verify: true` exactly for bots whose operator documents forward-confirmed reverse DNS or
/// a published IP list, and a crawler class only with `verify: true`; the data file names the
/// vendor's document per bot. The file is validated by the contract crate's rules when the
/// filter is built (build.rs), so this cannot fail at run time.
pub fn builtin_catalog() -> Vec<BotEntry> {
    BUILTIN
        .iter()
        .map(|(id, tokens, class, verify)| BotEntry {
            id: (*id).to_string(),
            ua_contains: tokens.iter().map(|t| (*t).to_string()).collect(),
            class: *class,
            verify: *verify,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin() -> Vec<BotEntry> {
        builtin_catalog()
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
    fn the_human_rule_is_the_data_files() {
        let h = builtin_human_rule();
        assert_eq!(
            (h.non_browser_id, h.non_browser_class),
            ("non-browser", Class::OtherBot)
        );
        assert_eq!(h.platform_section_after, ["mozilla/"]);
        assert_eq!(h.device_platforms.len(), 57);
        assert_eq!(h.desktop_platforms.len(), 22);
        assert_eq!(h.browser_tokens.len(), 20);
        assert_eq!(h.browser_forms.len(), 19);
        assert_eq!(h.markers_in_platform_section.len(), 8);
        assert_eq!(h.generic_markers_id, "declared-bot");
        assert!(h.device_platforms.contains(&"iphone") && h.device_platforms.contains(&"crkey"));
        assert!(h.browser_forms.contains(&"cfnetwork/") && h.browser_forms.contains(&"lynx/"));
        assert!(!builtin().iter().any(|e| e.id == h.non_browser_id));
    }

    #[test]
    fn robots_only_tokens_are_not_catalog_entries() {
        let cat = builtin();
        assert!(!cat
            .iter()
            .any(|e| e.id == "applebot-extended" || e.id == "google-extended"));
    }
}
