//! The filter and the sidecar derive their catalogs from one data file
//! (`contract/catalog/bots.json`); this proves the derivations agree on every id: each bot the
//! filter sends to the verifier (`verify: true`) is a built-in bot of the sidecar, in the same
//! order, and the sidecar knows no bot the filter never asks about.

use crawlguard_sidecar::catalog::builtin_bots;
use crawlguard_sidecar::config::Config;

fn filter_ids() -> Vec<String> {
    crawlguard_core::identity::catalog::builtin_catalog()
        .into_iter()
        .filter(|e| e.verify)
        .map(|e| e.id)
        .collect()
}

#[test]
fn filter_and_sidecar_agree_on_every_verified_id() {
    let filter = filter_ids();
    let sidecar: Vec<String> = builtin_bots()
        .expect("the sidecar's catalog loads")
        .iter()
        .map(|b| b.id.clone())
        .collect();
    assert_eq!(filter.len(), 56);
    assert_eq!(filter, sidecar);
}

#[test]
fn the_default_sidecar_configuration_has_methods_for_every_id_the_filter_sends() {
    let catalog = Config::default().catalog().expect("default catalog");
    let filter = filter_ids();
    assert_eq!(catalog.len(), filter.len());
    for id in &filter {
        assert!(catalog.contains_key(id), "{id}");
    }
    // FCrDNS bots resolve without any configuration; range-only bots use the vendor's
    // published URL, fetched by the sidecar.
    assert!(!catalog["googlebot"].domains.is_empty());
    assert!(catalog["gptbot"].domains.is_empty());
    assert_eq!(
        catalog["gptbot"].ranges,
        [crawlguard_sidecar::ranges::RangeSource::Url(
            "https://openai.com/gptbot.json".into()
        )]
    );
    // Only Meta's, Mistral's and the uptime monitors' bots (and Google's favicon fetcher,
    // FCrDNS only) have no published document.
    let without: Vec<&String> = catalog
        .iter()
        .filter(|(_, m)| m.ranges.is_empty())
        .map(|(id, _)| id)
        .collect();
    assert_eq!(without.len(), 23, "{without:?}");
}

#[test]
fn unverifiable_filter_bots_are_unknown_to_the_sidecar() {
    let catalog = Config::default().catalog().expect("default catalog");
    let unverifiable: Vec<String> = crawlguard_core::identity::catalog::builtin_catalog()
        .into_iter()
        .filter(|e| !e.verify)
        .map(|e| e.id)
        .collect();
    assert_eq!(unverifiable.len(), 105);
    for id in &unverifiable {
        assert!(!catalog.contains_key(id), "{id}");
    }
}
