//! The published-ranges document (`GET /v1/ranges`) of the ranges a [`Verifier`] uses now.

use super::Verifier;
use crate::resolver::Resolve;

impl<R: Resolve> Verifier<R> {
    /// The published-ranges document (`GET /v1/ranges`, `crawlguard_contract::ranges`) of
    /// the ranges in use now: per bot with at least one loaded range source, the prefixes
    /// of its loaded sources as one set (shared by bots with the same sources), `spoofed`
    /// outside it for a bot without FCrDNS domains (as [`Verifier::verify`] decides), else
    /// `fcrdns`. Returns the generation and the text.
    pub fn published_ranges(&self) -> (u64, String) {
        use crawlguard_contract::ranges::{render, OutOfRange, Prefix};
        let mut keys: Vec<Vec<&crate::ranges::RangeSource>> = Vec::new();
        let mut sets: Vec<Vec<Prefix>> = Vec::new();
        let mut bots = Vec::new();
        for (id, methods) in &self.catalog {
            let mut key = Vec::new();
            let mut prefixes: Vec<Prefix> = Vec::new();
            for source in &methods.ranges {
                let set = self.ranges.get(source);
                if set.is_empty() || key.contains(&source) {
                    continue;
                }
                key.push(source);
                let v4 = set.v4.iter().map(|n| (n.network().into(), n.prefix_len()));
                let v6 = set.v6.iter().map(|n| (n.network().into(), n.prefix_len()));
                prefixes.extend(v4.chain(v6));
            }
            if key.is_empty() {
                continue;
            }
            let index = match keys.iter().position(|k| *k == key) {
                Some(i) => i,
                None => {
                    keys.push(key);
                    sets.push(prefixes);
                    sets.len() - 1
                }
            };
            let out = match methods.domains.is_empty() {
                true => OutOfRange::Spoofed,
                false => OutOfRange::Fcrdns,
            };
            bots.push((id.clone(), out, index));
        }
        render(&sets, &bots)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::Method;
    use crate::config::BotMethods;
    use crate::ranges::{RangeSource, RangeStore};
    use std::net::IpAddr;
    use std::path::PathBuf;
    use std::sync::Arc;

    #[tokio::test]
    async fn published_ranges_decide_as_verify_does() {
        use crawlguard_contract::ranges::{parse, OutOfRange};
        let data = |rel: &str| {
            RangeSource::File(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../shared/data")
                    .join(rel),
            )
        };
        let googlebot = data("google-crawler-ips/googlebot.json");
        let gptbot = data("openai-crawler-ips/gptbot.json");
        let never = RangeSource::File(PathBuf::from("/nonexistent/ranges.json"));
        let store = Arc::new(RangeStore::new([
            googlebot.clone(),
            gptbot.clone(),
            never.clone(),
        ]));
        store.refresh_files();
        let v = verifier_with(
            FakeResolver::default(),
            vec![
                (
                    "googlebot",
                    BotMethods {
                        ranges: vec![googlebot.clone()],
                        ..google()
                    },
                ),
                (
                    "googlebot-image",
                    BotMethods {
                        ranges: vec![googlebot.clone()],
                        ..google()
                    },
                ),
                (
                    "gptbot",
                    BotMethods {
                        domains: vec![],
                        ranges: vec![gptbot.clone(), never.clone()],
                    },
                ),
                (
                    "claudebot",
                    BotMethods {
                        domains: vec![],
                        ranges: vec![never],
                    },
                ),
                ("yandexbot", google()),
            ],
            store.clone(),
            settings(),
        );
        let (generation, text) = v.published_ranges();
        let table = parse(text.as_bytes()).expect("the sidecar's own document");
        assert_eq!(
            table.generation,
            crawlguard_contract::ranges::generation_text(generation)
        );
        // One set per loaded source, shared by the two Google bots; only bots with ranges.
        assert_eq!(table.sets.len(), 2);
        assert_eq!(table.prefixes(), 169 + 146 + 8);
        let bots: Vec<(&str, OutOfRange, u32)> = table
            .bots
            .iter()
            .map(|b| (b.id.as_str(), b.out_of_range, b.set))
            .collect();
        assert_eq!(
            bots,
            [
                ("googlebot", OutOfRange::Fcrdns, 0),
                ("googlebot-image", OutOfRange::Fcrdns, 0),
                ("gptbot", OutOfRange::Spoofed, 1),
            ]
        );
        let mut addrs: Vec<IpAddr> = Vec::new();
        for source in [&googlebot, &gptbot] {
            let set = store.get(source);
            for n in &set.v4 {
                let (first, last) = (u32::from(n.network()), u32::from(n.broadcast()));
                addrs.extend(
                    [first.wrapping_sub(1), first, last, last.wrapping_add(1)]
                        .map(|a| IpAddr::from(std::net::Ipv4Addr::from(a))),
                );
            }
            for n in &set.v6 {
                let (first, last) = (u128::from(n.network()), u128::from(n.broadcast()));
                addrs.extend(
                    [first.wrapping_sub(1), first, last, last.wrapping_add(1)]
                        .map(|a| IpAddr::from(std::net::Ipv6Addr::from(a))),
                );
            }
        }
        let mut decided = 0;
        for ip in addrs {
            for bot in ["googlebot", "gptbot", "claudebot", "yandexbot"] {
                let answer = v.verify(ip, bot).await.expect("a verdict");
                match table.verdict(ip, bot) {
                    Some(verdict) => {
                        assert_eq!(
                            (verdict, Method::IpRange),
                            (answer.verdict, answer.method),
                            "{ip} {bot}"
                        );
                        decided += 1;
                    }
                    // Not decided by ranges: the sidecar decides by FCrDNS or cannot decide.
                    None => assert_ne!(answer.method, Method::IpRange, "{ip} {bot}"),
                }
            }
        }
        // Every gptbot claim, and the Googlebot claims inside the ranges.
        assert!(decided > (169 + 146 + 8) * 4, "{decided}");
    }
}
