//! The built-in bot catalog: which verification methods each bot id supports.
//!
//! Bot ids are exactly the filter's catalog ids (`src/classify.rs`, entries with
//! `verify: true`), plus a few monitoring bots operators commonly allow. Domains come from each
//! vendor's own verification page (named per group below). Range *files* are never built in:
//! they are operator-provided copies of the vendors' publications (this service never fetches
//! anything), so range-only bots answer `unknown` until the configuration points them at a
//! file (see `verifier.example.toml`).

/// One catalog entry as built in.
#[derive(Debug, Clone, Copy)]
pub struct BuiltinBot {
    /// Bot id as the filter sends it (`bot=` query parameter).
    pub id: &'static str,
    /// FCrDNS domains (label-boundary suffixes). Empty: the vendor documents no rDNS method.
    pub domains: &'static [&'static str],
}

// "Verifying Googlebot and other Google crawlers" (developers.google.com/search/docs/crawling-indexing/verifying-googlebot):
// common crawlers resolve to googlebot.com, special-case crawlers to google.com, user-triggered
// fetchers to google.com or googleusercontent.com.
const GOOGLE: &[&str] = &["googlebot.com", "google.com", "googleusercontent.com"];
// Bing Webmaster "Verifying Bingbot": hosts end in search.msn.com.
const BING: &[&str] = &["search.msn.com"];
// Yandex Help "How to check that a robot belongs to Yandex".
const YANDEX: &[&str] = &["yandex.ru", "yandex.net", "yandex.com"];
// Baidu "How can I know the crawler is Baiduspider": *.baidu.com or *.baidu.jp.
const BAIDU: &[&str] = &["baidu.com", "baidu.jp"];
/// No rDNS method: the vendor publishes IP ranges only (OpenAI, Perplexity, Anthropic,
/// DuckDuckGo, Mistral, Meta, monitoring services).
const RANGES_ONLY: &[&str] = &[];

const fn bot(id: &'static str, domains: &'static [&'static str]) -> BuiltinBot {
    BuiltinBot { id, domains }
}

/// Every built-in bot, in the filter's catalog order.
pub const BUILTIN_BOTS: &[BuiltinBot] = &[
    bot("googlebot", GOOGLE),
    bot("googlebot-image", GOOGLE),
    bot("googlebot-video", GOOGLE),
    bot("googlebot-news", GOOGLE),
    bot("storebot-google", GOOGLE),
    bot("google-inspectiontool", GOOGLE),
    bot("googleother", GOOGLE),
    bot("google-cloudvertexbot", GOOGLE),
    bot("google-notebooklm", GOOGLE),
    bot("adsbot-google", GOOGLE),
    bot("mediapartners-google", GOOGLE),
    bot("apis-google", GOOGLE),
    bot("feedfetcher-google", GOOGLE),
    bot("google-read-aloud", GOOGLE),
    bot("google-site-verification", GOOGLE),
    bot("google-safety", GOOGLE),
    bot("googleproducer", GOOGLE),
    bot("google-favicon", GOOGLE),
    bot("bingbot", BING),
    bot("msnbot", BING),
    bot("bingpreview", BING),
    bot("adidxbot", BING),
    // OpenAI "Overview of OpenAI Crawlers": gptbot.json, searchbot.json, chatgpt-user.json.
    bot("oai-searchbot", RANGES_ONLY),
    bot("chatgpt-user", RANGES_ONLY),
    bot("gptbot", RANGES_ONLY),
    // Perplexity "Perplexity Crawlers": perplexitybot.json, perplexity-user.json.
    bot("perplexitybot", RANGES_ONLY),
    bot("perplexity-user", RANGES_ONLY),
    // Anthropic "Does Anthropic crawl data from the web": published IP ranges.
    bot("claudebot", RANGES_ONLY),
    bot("claude-user", RANGES_ONLY),
    bot("claude-searchbot", RANGES_ONLY),
    // DuckDuckGo "DuckDuckBot" / "DuckAssistBot" help pages: published IP lists.
    bot("duckduckbot", RANGES_ONLY),
    bot("duckassistbot", RANGES_ONLY),
    // Mistral "Robots and crawlers": published IP ranges.
    bot("mistralai-user", RANGES_ONLY),
    bot("mistralai-index", RANGES_ONLY),
    // Meta "Meta Web Crawlers": addresses of AS32934 (whois -i origin AS32934), no rDNS.
    bot("meta-externalagent", RANGES_ONLY),
    bot("meta-externalfetcher", RANGES_ONLY),
    bot("meta-webindexer", RANGES_ONLY),
    bot("facebookbot", RANGES_ONLY),
    bot("facebookexternalhit", RANGES_ONLY),
    // Amazon "About Amazonbot": PTR is a subdomain of crawl.amazonbot.amazon.
    bot("amazonbot", &["crawl.amazonbot.amazon"]),
    // Apple "About Applebot": *.applebot.apple.com.
    bot("applebot", &["applebot.apple.com"]),
    // Common Crawl "CCBot": crawl.commoncrawl.org.
    bot("ccbot", &["crawl.commoncrawl.org"]),
    bot("baiduspider", BAIDU),
    bot("yandexbot", YANDEX),
    bot("yandex", YANDEX),
    bot("yandexadditional", YANDEX),
    // Seznam "SeznamBot crawler": fulltextrobot-*.seznam.cz.
    bot("seznambot", &["seznam.cz"]),
    // Naver Search Advisor "Yeti": *.naver.com.
    bot("yeti", &["naver.com"]),
    // Huawei "PetalBot": *.petalsearch.com (older hosts *.aspiegel.com).
    bot("petalbot", &["petalsearch.com", "aspiegel.com"]),
    // Yahoo "Slurp": *.crawl.yahoo.net.
    bot("slurp", &["crawl.yahoo.net"]),
    // Ahrefs "AhrefsBot": *.ahrefs.com and *.ahrefs.net.
    bot("ahrefsbot", &["ahrefs.com", "ahrefs.net"]),
    // Monitoring services publish probe IP lists only.
    bot("uptimerobot", RANGES_ONLY),
    bot("pingdom", RANGES_ONLY),
    bot("statuscake", RANGES_ONLY),
    bot("site24x7", RANGES_ONLY),
    // Pinterest Help "Pinterest crawler": the PTR name ends with pinterest.com.
    bot("pinterestbot", &["pinterest.com"]),
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The ids the brief (and the filter's `verify: true` catalog) requires.
    const REQUIRED: &[&str] = &[
        "googlebot",
        "googlebot-image",
        "googlebot-video",
        "googlebot-news",
        "storebot-google",
        "google-inspectiontool",
        "googleother",
        "google-cloudvertexbot",
        "google-notebooklm",
        "adsbot-google",
        "mediapartners-google",
        "apis-google",
        "feedfetcher-google",
        "google-read-aloud",
        "google-site-verification",
        "google-safety",
        "googleproducer",
        "google-favicon",
        "bingbot",
        "msnbot",
        "bingpreview",
        "adidxbot",
        "oai-searchbot",
        "chatgpt-user",
        "gptbot",
        "perplexitybot",
        "perplexity-user",
        "claudebot",
        "claude-user",
        "claude-searchbot",
        "duckduckbot",
        "duckassistbot",
        "mistralai-user",
        "mistralai-index",
        "meta-externalagent",
        "meta-externalfetcher",
        "meta-webindexer",
        "facebookbot",
        "facebookexternalhit",
        "amazonbot",
        "applebot",
        "ccbot",
        "baiduspider",
        "yandexbot",
        "yandex",
        "yandexadditional",
        "seznambot",
        "yeti",
        "petalbot",
        "slurp",
        "ahrefsbot",
        "uptimerobot",
        "pingdom",
        "statuscake",
        "site24x7",
        "pinterestbot",
    ];

    #[test]
    fn catalog_covers_every_required_id_exactly_once() {
        let ids: Vec<&str> = BUILTIN_BOTS.iter().map(|b| b.id).collect();
        let unique: HashSet<&str> = ids.iter().copied().collect();
        assert_eq!(unique.len(), ids.len(), "duplicate ids in catalog");
        let required: HashSet<&str> = REQUIRED.iter().copied().collect();
        assert_eq!(unique, required);
    }

    #[test]
    fn catalog_ids_and_domains_are_well_formed() {
        for b in BUILTIN_BOTS {
            assert!(crate::config::is_valid_bot_id(b.id), "{}", b.id);
            for d in b.domains {
                assert!(crate::domain::is_valid_domain(d), "{}: {d}", b.id);
                assert_eq!(*d, d.to_ascii_lowercase());
            }
        }
    }

    #[test]
    fn domains_of_key_bots() {
        let get = |id: &str| BUILTIN_BOTS.iter().find(|b| b.id == id).unwrap().domains;
        assert_eq!(
            get("googlebot"),
            ["googlebot.com", "google.com", "googleusercontent.com"]
        );
        assert_eq!(get("bingbot"), ["search.msn.com"]);
        assert_eq!(get("baiduspider"), ["baidu.com", "baidu.jp"]);
        assert_eq!(get("yandexbot"), ["yandex.ru", "yandex.net", "yandex.com"]);
        assert_eq!(get("applebot"), ["applebot.apple.com"]);
        assert_eq!(get("ccbot"), ["crawl.commoncrawl.org"]);
        assert_eq!(get("amazonbot"), ["crawl.amazonbot.amazon"]);
        assert!(get("gptbot").is_empty());
        assert!(get("perplexitybot").is_empty());
        assert!(get("duckduckbot").is_empty());
    }
}
