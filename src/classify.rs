//! User-Agent classification: a UA string becomes a *bot id* and a *class*.
//!
//! The catalog is an ordered list of [`BotEntry`]; each entry lists case-insensitive substrings
//! of the `User-Agent`. The first entry (in catalog order) with any matching token wins, so
//! specific tokens (`Googlebot-Image`, `AdsBot-Google`, `OAI-SearchBot`) are listed before the
//! generic ones they would otherwise be confused with (`Googlebot`, `GPTBot`). A UA that matches
//! nothing is `human`; an empty, missing or whitespace-only UA is `script`.
//!
//! Matching works on raw bytes (the header may be any bytes, not UTF-8) with an ASCII
//! case-insensitive comparison and never allocates: tokens are lowercased once at
//! construction and bucketed by their first byte, so each UA byte only looks at the few tokens
//! that can start there.

use serde::{Deserialize, Serialize};

/// The traffic class of a request; limits, Retry-After ranges and stats are keyed by it.
///
/// Serialized in snake_case (`"search_crawler"`, ...), the spelling used in configuration,
/// stats names and the class header sent upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Verified (or not needing verification) search-engine crawler: Googlebot, bingbot, ...
    SearchCrawler,
    /// Fetches a page because a user asked an AI assistant right now: ChatGPT-User, ...
    AiRetriever,
    /// Crawls for model training: GPTBot, ClaudeBot, CCBot, ...
    AiTrainer,
    /// SEO, monitoring and other declared bots.
    OtherBot,
    /// HTTP libraries and command-line tools, and requests with an empty or missing UA.
    Script,
    /// Everything else (browsers).
    Human,
    /// A crawler UA whose claim needs verification that has not (yet) succeeded.
    UnverifiedBot,
    /// A crawler UA whose claim was checked and failed (set by the verifier path).
    Spoofed,
}

impl Class {
    /// Every class, in a fixed order (used to pre-define stats).
    pub const ALL: [Class; 8] = [
        Class::SearchCrawler,
        Class::AiRetriever,
        Class::AiTrainer,
        Class::OtherBot,
        Class::Script,
        Class::Human,
        Class::UnverifiedBot,
        Class::Spoofed,
    ];

    /// The snake_case name, as used in config, stats and the class header.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::SearchCrawler => "search_crawler",
            Class::AiRetriever => "ai_retriever",
            Class::AiTrainer => "ai_trainer",
            Class::OtherBot => "other_bot",
            Class::Script => "script",
            Class::Human => "human",
            Class::UnverifiedBot => "unverified_bot",
            Class::Spoofed => "spoofed",
        }
    }

    /// Position in [`Class::ALL`] (its declaration order), for per-class tables.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// True for the crawler classes (`search_crawler`, `ai_retriever`, `ai_trainer`): the
    /// ones a request only gets once its claim is verified, and whose degraded pages the
    /// soft-404 guard turns into 503s.
    pub const fn is_crawler(self) -> bool {
        matches!(
            self,
            Class::SearchCrawler | Class::AiRetriever | Class::AiTrainer
        )
    }

    /// Parses a snake_case class name; `None` if unknown.
    pub fn parse(name: &str) -> Option<Class> {
        Class::ALL.iter().copied().find(|c| c.as_str() == name)
    }
}

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

/// The result of classifying one User-Agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification<'a> {
    /// The matched catalog entry, if any.
    pub bot: Option<&'a BotEntry>,
    /// The class the request gets now: the entry's class, or `UnverifiedBot` when the entry
    /// has `verify: true` (the verifier path may upgrade it later).
    pub class: Class,
}

/// A built-in catalog row (static data, turned into a [`BotEntry`] by [`builtin_catalog`]).
struct Spec {
    id: &'static str,
    tokens: &'static [&'static str],
    class: Class,
    verify: bool,
}

const fn bot(
    id: &'static str,
    tokens: &'static [&'static str],
    class: Class,
    verify: bool,
) -> Spec {
    Spec {
        id,
        tokens,
        class,
        verify,
    }
}

use Class::{AiRetriever as RETRIEVER, AiTrainer as TRAINER, OtherBot as OTHER};
use Class::{Script as SCRIPT, SearchCrawler as SEARCH};

/// `verify: true` means the operator documents a verification method (forward-confirmed
/// reverse DNS and/or a published IP-range list); the document is named in the comment above
/// each group. Order matters: first match wins, specific tokens first.
///
/// A crawler class (`search_crawler`, `ai_retriever`, `ai_trainer`) is only ever given to a
/// verified claim: anyone can copy a User-Agent, so crawlers whose operator publishes no
/// verification method are `other_bot` here, whatever they call themselves (the group
/// comments say what they are).
///
/// Robots-only tokens that never appear in a User-Agent (`Google-Extended`,
/// `Applebot-Extended`) are deliberately absent: a UA claiming them is not that crawler.
static CATALOG: &[Spec] = &[
    // --- Google. "Verifying Googlebot and other Google crawlers" (Google Search Central):
    // reverse DNS to googlebot.com / google.com / googleusercontent.com and the published
    // googlebot.json, special-crawlers.json, user-triggered-fetchers*.json ranges.
    // Specific Google crawlers first: each also contains "Googlebot" or "Google".
    bot("googlebot-image", &["googlebot-image"], SEARCH, true),
    bot("googlebot-video", &["googlebot-video"], SEARCH, true),
    bot("googlebot-news", &["googlebot-news"], SEARCH, true),
    bot("storebot-google", &["storebot-google"], SEARCH, true),
    bot(
        "google-inspectiontool",
        &["google-inspectiontool"],
        SEARCH,
        true,
    ),
    bot("googleother", &["googleother"], OTHER, true),
    bot(
        "google-cloudvertexbot",
        &["google-cloudvertexbot"],
        TRAINER,
        true,
    ),
    bot("google-notebooklm", &["google-notebooklm"], RETRIEVER, true),
    bot("adsbot-google", &["adsbot-google"], OTHER, true),
    // "Mediapartners (Googlebot)" is the old AdSense UA: not plain Googlebot.
    bot(
        "mediapartners-google",
        &["mediapartners-google", "mediapartners (googlebot)"],
        OTHER,
        true,
    ),
    bot("apis-google", &["apis-google"], OTHER, true),
    bot("feedfetcher-google", &["feedfetcher-google"], OTHER, true),
    bot("google-read-aloud", &["google-read-aloud"], OTHER, true),
    bot(
        "google-site-verification",
        &["google-site-verification"],
        OTHER,
        true,
    ),
    bot("google-safety", &["google-safety"], OTHER, true),
    bot("googleproducer", &["googleproducer"], OTHER, true),
    bot("google-favicon", &["google favicon"], OTHER, true),
    bot("googlebot", &["googlebot"], SEARCH, true),
    // Other Google agents (proxies, Apps Script, uptime checks, ...): no published
    // verification, and some run user code on Google's infrastructure.
    bot(
        "google-other-agent",
        &[
            "google-",
            "googleimageproxy",
            "googleassociationservice",
            "googledocs",
            "googlestackdriver",
            "appengine-google",
        ],
        OTHER,
        false,
    ),
    // --- Microsoft. "Verifying Bingbot" (Bing Webmaster Tools): reverse DNS to
    // search.msn.com and the published bingbot.json ranges; covers every Bing crawler.
    bot("bingpreview", &["bingpreview"], OTHER, true),
    bot("adidxbot", &["adidxbot"], OTHER, true),
    bot("bingbot", &["bingbot"], SEARCH, true),
    bot("msnbot", &["msnbot"], SEARCH, true),
    // --- OpenAI. "Overview of OpenAI Crawlers" (platform.openai.com/docs/bots):
    // searchbot.json, chatgpt-user.json, gptbot.json.
    bot("oai-searchbot", &["oai-searchbot"], RETRIEVER, true),
    bot("chatgpt-user", &["chatgpt-user"], RETRIEVER, true),
    bot("gptbot", &["gptbot"], TRAINER, true),
    // --- Perplexity. "Perplexity Crawlers" (docs.perplexity.ai): perplexitybot.json,
    // perplexity-user.json.
    bot("perplexity-user", &["perplexity-user"], RETRIEVER, true),
    bot("perplexitybot", &["perplexitybot"], RETRIEVER, true),
    // --- Anthropic. Support article "Does Anthropic crawl data from the web, and how can site
    // owners block the crawler?" (links the published IP list claude.com/crawling/bots.json).
    bot("claude-user", &["claude-user"], RETRIEVER, true),
    bot("claude-searchbot", &["claude-searchbot"], RETRIEVER, true),
    bot("claudebot", &["claudebot"], TRAINER, true),
    // Retired Anthropic tokens, not covered by the published list.
    bot("claude-web", &["claude-web"], OTHER, false),
    bot("anthropic-ai", &["anthropic-ai"], OTHER, false),
    // --- DuckDuckGo. Help pages "DuckDuckBot" and "DuckAssistBot": published IP lists
    // (duckduckbot.json, duckassistbot.json). DuckDuckGo's *browser* UA contains
    // "DuckDuckGo/5", so no bare "duckduckgo" token.
    bot("duckassistbot", &["duckassistbot"], RETRIEVER, true),
    bot("duckduckbot", &["duckduckbot"], SEARCH, true),
    bot(
        "duckduckgo-favicons-bot",
        &["duckduckgo-favicons-bot"],
        OTHER,
        false,
    ),
    // --- Mistral. "Mistral crawlers" (docs.mistral.ai/robots): published IP addresses.
    bot("mistralai-user", &["mistralai-user"], RETRIEVER, true),
    bot("mistralai-index", &["mistralai-index"], RETRIEVER, true),
    // --- Meta. "Meta Web Crawlers" (developers.facebook.com/docs/sharing/webmasters/
    // web-crawlers): IP ranges published as the route objects of AS32934.
    bot("meta-externalagent", &["meta-externalagent"], TRAINER, true),
    bot(
        "meta-externalfetcher",
        &["meta-externalfetcher"],
        RETRIEVER,
        true,
    ),
    bot("meta-webindexer", &["meta-webindexer"], RETRIEVER, true),
    bot("facebookbot", &["facebookbot"], TRAINER, true),
    bot(
        "facebookexternalhit",
        &["facebookexternalhit", "facebookcatalog"],
        OTHER,
        true,
    ),
    // --- Amazon. "Amazonbot" (developer.amazon.com/amazonbot): reverse DNS to
    // crawl.amazonbot.amazon and a published IP list.
    bot("amazonbot", &["amazonbot"], TRAINER, true),
    bot("amzn-searchbot", &["amzn-searchbot"], OTHER, false),
    bot("amzn-user", &["amzn-user"], OTHER, false),
    // --- Apple. "About Applebot" (support.apple.com/en-us/119829): reverse DNS to
    // applebot.apple.com and applebot.json.
    bot("applebot", &["applebot"], SEARCH, true),
    // --- Common Crawl. "CCBot" (commoncrawl.org/ccbot): published IP ranges and reverse DNS.
    bot("ccbot", &["ccbot"], TRAINER, true),
    // --- Baidu. Baidu Search Resource Platform help "How to identify Baiduspider": reverse
    // DNS to baidu.com / baidu.jp.
    bot("baiduspider", &["baiduspider"], SEARCH, true),
    // --- Yandex. Yandex Webmaster help "How to check that a robot belongs to Yandex":
    // reverse DNS to yandex.ru / yandex.net / yandex.com. YandexAdditional feeds YandexGPT.
    bot("yandexadditional", &["yandexadditional"], TRAINER, true),
    bot(
        "yandexbot",
        &[
            "yandexbot",
            "yandeximages",
            "yandexvideo",
            "yandexmobilebot",
            "yandexnews",
        ],
        SEARCH,
        true,
    ),
    // Every other Yandex robot (Metrika, Direct, favicons, ...) links yandex.com/bots.
    bot(
        "yandex",
        &["yandex.com/bots", "yandex.ru/bots"],
        OTHER,
        true,
    ),
    // --- Other search engines.
    // "SeznamBot crawler" (napoveda.seznam.cz): IP list and PTR names under seznam.cz.
    bot("seznambot", &["seznambot"], SEARCH, true),
    // Naver Search Advisor "검색로봇 확인 방법" (how to identify the search robot): reverse DNS.
    bot("yeti", &["yeti/"], SEARCH, true),
    // Petal Search webmaster page "PetalBot": reverse DNS to petalsearch.com.
    bot("petalbot", &["petalbot"], SEARCH, true),
    // Yahoo help "Slurp": reverse DNS to crawl.yahoo.net.
    bot("slurp", &["slurp"], SEARCH, true),
    // Search engines that publish no verification method: other_bot.
    // Sogou's browser says "SogouMobileBrowser" / "MetaSr": only its spiders' names here.
    bot(
        "sogou",
        &[
            "sogou web spider",
            "sogou news spider",
            "sogou pic spider",
            "sogou video spider",
            "sogou inst spider",
            "sogou orion spider",
            "sogou push spider",
            "sogou head spider",
            "sogou develop spider",
            "sogou-test-spider",
            "sogou spider",
        ],
        OTHER,
        false,
    ),
    bot("qwantbot", &["qwantbot", "qwantify"], OTHER, false),
    bot("coccocbot", &["coccocbot", "coccoc/"], OTHER, false),
    bot("mojeekbot", &["mojeekbot"], OTHER, false),
    bot("mail.ru_bot", &["mail.ru_bot"], OTHER, false),
    bot("360spider", &["360spider"], OTHER, false),
    bot("yisouspider", &["yisouspider"], OTHER, false),
    bot("daum", &["daumoa", "daum/"], OTHER, false),
    bot("seekportbot", &["seekportbot"], OTHER, false),
    bot("bravebot", &["bravebot"], OTHER, false),
    bot("aspiegelbot", &["aspiegelbot"], OTHER, false),
    // --- More AI crawlers (ai-robots-txt robots.json "function"; no verification documented,
    // so other_bot).
    bot("bytespider", &["bytespider"], OTHER, false),
    bot("tiktokspider", &["tiktokspider"], OTHER, false),
    bot(
        "cohere-training-data-crawler",
        &["cohere-training-data-crawler"],
        OTHER,
        false,
    ),
    bot("cohere-ai", &["cohere-ai"], OTHER, false),
    bot("mistralai-training", &["mistralai-training"], OTHER, false),
    bot("diffbot", &["diffbot"], OTHER, false),
    bot("ai2bot", &["ai2bot"], OTHER, false),
    bot("deepseekbot", &["deepseekbot"], OTHER, false),
    bot("pangubot", &["pangubot"], OTHER, false),
    bot("timpibot", &["timpibot"], OTHER, false),
    bot("omgilibot", &["omgili"], OTHER, false),
    bot("webzio-extended", &["webzio-extended"], OTHER, false),
    bot("imagesiftbot", &["imagesiftbot"], OTHER, false),
    bot("img2dataset", &["img2dataset"], OTHER, false),
    bot("icc-crawler", &["icc-crawler"], OTHER, false),
    bot(
        "laiondownloader",
        &["laiondownloader", "laion-huggingface-processor"],
        OTHER,
        false,
    ),
    bot(
        "velenpublicwebcrawler",
        &["velenpublicwebcrawler"],
        OTHER,
        false,
    ),
    bot("cotoyogi", &["cotoyogi"], OTHER, false),
    bot("sbintuitionsbot", &["sbintuitionsbot"], OTHER, false),
    bot("friendlycrawler", &["friendlycrawler"], OTHER, false),
    bot(
        "isscyberriskcrawler",
        &["isscyberriskcrawler"],
        OTHER,
        false,
    ),
    bot("factset_spyderbot", &["factset_spyderbot"], OTHER, false),
    bot("chatglm-spider", &["chatglm-spider"], OTHER, false),
    bot("brightbot", &["brightbot"], OTHER, false),
    bot("kangaroo-bot", &["kangaroo bot"], OTHER, false),
    bot("aihitbot", &["aihitbot"], OTHER, false),
    bot("bedrockbot", &["bedrockbot"], OTHER, false),
    bot("panscient", &["panscient"], OTHER, false),
    bot("kagi-fetcher", &["kagi-fetcher"], OTHER, false),
    bot("kimi-user", &["kimi-user"], OTHER, false),
    bot("manus-user", &["manus-user"], OTHER, false),
    bot("tongyibot", &["tongyibot"], OTHER, false),
    bot("yiyanbot", &["yiyanbot"], OTHER, false),
    bot("phindbot", &["phindbot"], OTHER, false),
    bot("youbot", &["youbot"], OTHER, false),
    bot("andibot", &["andibot"], OTHER, false),
    bot("iaskspider", &["iaskspider", "iaskbot"], OTHER, false),
    bot("linkupbot", &["linkupbot"], OTHER, false),
    bot("tavilybot", &["tavilybot"], OTHER, false),
    bot("exasearchbot", &["exasearchbot"], OTHER, false),
    bot(
        "gemini-deep-research",
        &["gemini-deep-research"],
        OTHER,
        false,
    ),
    bot(
        "googleagent-urlcontext",
        &["googleagent-urlcontext"],
        OTHER,
        false,
    ),
    bot("cloudflare-autorag", &["cloudflare-autorag"], OTHER, false),
    // --- SEO crawlers. "Ahrefs Bots" (ahrefs.com/robot): published IP list, reverse DNS.
    bot("ahrefsbot", &["ahrefsbot", "ahrefssiteaudit"], OTHER, true),
    bot(
        "semrushbot",
        &["semrushbot", "siteauditbot", "semrush"],
        OTHER,
        false,
    ),
    bot("mj12bot", &["mj12bot"], OTHER, false),
    bot("dotbot", &["dotbot"], OTHER, false),
    bot("rogerbot", &["rogerbot"], OTHER, false),
    bot("screaming-frog", &["screaming frog"], OTHER, false),
    bot("dataforseobot", &["dataforseobot"], OTHER, false),
    bot("blexbot", &["blexbot"], OTHER, false),
    bot("serpstatbot", &["serpstatbot"], OTHER, false),
    bot("barkrowler", &["barkrowler"], OTHER, false),
    bot("megaindex", &["megaindex"], OTHER, false),
    bot("sistrix", &["sistrix"], OTHER, false),
    bot("seokicks", &["seokicks"], OTHER, false),
    bot("seobility", &["seobility"], OTHER, false),
    bot("linkdexbot", &["linkdexbot"], OTHER, false),
    bot("siteimprove", &["siteimprove"], OTHER, false),
    bot("sitebulb", &["sitebulb"], OTHER, false),
    bot("oncrawl", &["oncrawl"], OTHER, false),
    bot("lighthouse", &["chrome-lighthouse"], OTHER, false),
    // --- Monitoring. UptimeRobot "Locations and IPs", Pingdom "Probe server IP addresses",
    // StatusCake "IP addresses", Site24x7 "IP addresses of monitoring locations": all
    // publish the IP lists their probes use.
    bot("uptimerobot", &["uptimerobot"], OTHER, true),
    bot("pingdom", &["pingdom"], OTHER, true),
    bot("statuscake", &["statuscake"], OTHER, true),
    bot("site24x7", &["site24x7"], OTHER, true),
    bot("newrelicpinger", &["newrelicpinger"], OTHER, false),
    bot("datadog-synthetics", &["datadogsynthetics"], OTHER, false),
    bot(
        "betteruptime",
        &["betteruptime", "better uptime"],
        OTHER,
        false,
    ),
    bot("uptime-kuma", &["uptime-kuma"], OTHER, false),
    bot("gtmetrix", &["gtmetrix"], OTHER, false),
    bot("nagios", &["check_http", "nagios"], OTHER, false),
    bot("zabbix", &["zabbix"], OTHER, false),
    bot("catchpoint", &["catchpoint"], OTHER, false),
    bot("netcraft", &["netcraft"], OTHER, false),
    bot("w3c-validator", &["w3c_", "w3c-"], OTHER, false),
    bot("baidu-yunguance", &["baidu-yunguance"], OTHER, false),
    bot("ips-agent", &["ips-agent"], OTHER, false),
    bot("larbin", &["larbin", "binlar"], OTHER, false),
    bot("hatena", &["hatena"], OTHER, false),
    // --- Link previews, feeds and archives. "Pinterest crawler" help: reverse DNS to
    // pinterest.com.
    bot(
        "pinterestbot",
        &["pinterestbot", "pinterest.com/bot"],
        OTHER,
        true,
    ),
    bot("twitterbot", &["twitterbot"], OTHER, false),
    bot("linkedinbot", &["linkedinbot"], OTHER, false),
    bot("slackbot", &["slackbot", "slack-imgproxy"], OTHER, false),
    bot("discordbot", &["discordbot"], OTHER, false),
    bot("telegrambot", &["telegrambot"], OTHER, false),
    bot("redditbot", &["redditbot"], OTHER, false),
    bot("embedly", &["embedly"], OTHER, false),
    bot("iframely", &["iframely"], OTHER, false),
    bot("skypeuripreview", &["skypeuripreview"], OTHER, false),
    bot("feedly", &["feedly"], OTHER, false),
    bot(
        "archive.org_bot",
        &["archive.org_bot", "ia_archiver"],
        OTHER,
        false,
    ),
    // --- Scripts: HTTP libraries, command-line tools, headless browsers. After the named
    // bots (a bot built on a library usually names itself first), before the generic rule.
    bot(
        "script",
        &[
            "curl/",
            "libcurl",
            "pycurl",
            "wget",
            "python-requests",
            "python-urllib",
            "python-httpx",
            "python",
            "httpclient",
            "http-client",
            "http client",
            "google-http-java-client",
            "jersey/",
            "java-",
            "scalaj-http",
            "lua-resty-http",
            "node-oauth",
            "rusoto",
            "s3fs/",
            "minio-go",
            "jets3t",
            "whatweb",
            "openvas",
            "aiohttp",
            "httpx",
            "go-http-client",
            "go-resty",
            "scrapy",
            // The JDK's default "Java/1.8.0_x", "Java/17.0.2"; not J2ME phones' "Java/ASVM".
            "java/1",
            "java/2",
            "java/8",
            "java/9",
            "apache-httpclient",
            "apache-httpasyncclient",
            // okhttp's default UA; apps naming themselves and "okhttp3" in a comment are apps.
            "okhttp/",
            "libwww-perl",
            "lwp::simple",
            "lwp-trivial",
            "colly",
            "newspaper/",
            "pcore-http",
            "acunetix",
            "zmeu",
            "node-fetch",
            "undici",
            "axios/",
            "got (https://github.com/sindresorhus/got)",
            "guzzlehttp",
            "php/",
            "php-curl-class",
            "ruby/",
            "faraday",
            "rest-client",
            "httpie",
            "postmanruntime",
            "insomnia/",
            "reqwest",
            "ureq/",
            "hyper/",
            "headlesschrome",
            "phantomjs",
            "puppeteer",
            "playwright",
            "selenium",
            "httrack",
            "aria2/",
            "lftp",
            "mechanize",
            "winhttp",
            "aws-sdk-",
            "aws-cli",
            "urlgrabber",
            "rclone/",
            "dart:io",
            "http.rb",
            "akka-http",
            "reactornetty",
            "vert.x-webclient",
            "zgrab",
            "masscan",
            "nmap",
            "sqlmap",
            "nikto",
            "nuclei",
        ],
        SCRIPT,
        false,
    ),
    // --- Self-declared bots: the conventional markers of an automated client. Last, so every
    // named bot and library wins. Measured on uap-core browser UAs and crawler-user-agents
    // (tests/classify_real_data.rs). "bot" only with a delimiter: phone models such as
    // "CUBOT ONE" appear in browser UAs, and "Botswana" in Facebook app UAs. Browsers never
    // put a URL or a contact in their UA; crawlers conventionally do ("+http://.../bot.html").
    bot(
        "declared-bot",
        &[
            "bot/",
            "bot;",
            "bot)",
            "bot,",
            "bot-",
            " bot",
            "-bot",
            "_bot",
            "robot",
            "crawl",
            // "<letter>bot " except "ubot ": the "CUBOT ONE" phone.
            "abot ",
            "bbot ",
            "cbot ",
            "dbot ",
            "ebot ",
            "fbot ",
            "gbot ",
            "hbot ",
            "ibot ",
            "jbot ",
            "kbot ",
            "lbot ",
            "mbot ",
            "nbot ",
            "obot ",
            "pbot ",
            "qbot ",
            "rbot ",
            "sbot ",
            "tbot ",
            "vbot ",
            "wbot ",
            "xbot ",
            "ybot ",
            "zbot ",
            "spider",
            "scraper",
            "fetcher",
            "checker",
            "linkcheck",
            "link check",
            "validator",
            "scan",
            "index",
            "archiv",
            "uptime",
            "monitor",
            "synthetic",
            "subscriber",
            "ptst/",
            "http://",
            "https://",
            "www.",
            "mailto:",
        ],
        OTHER,
        false,
    ),
];

/// The built-in catalog, ordered so that specific tokens win.
///
/// Classes follow the operators' own descriptions, cross-checked with the ai-robots-txt
/// `robots.json` "function" field and the crawler-user-agents tags. `verify: true` exactly for
/// bots whose operator documents forward-confirmed reverse DNS or a published IP list (the
/// document is named next to each group in the source). The last two entries are the generic
/// `script` rule (HTTP libraries, tools, headless browsers) and the generic `declared-bot` rule
/// (`bot/`, `crawl`, `spider`, `+http`, ...).
pub fn builtin_catalog() -> Vec<BotEntry> {
    CATALOG
        .iter()
        .map(|s| BotEntry {
            id: s.id.to_owned(),
            ua_contains: s.tokens.iter().map(|t| (*t).to_owned()).collect(),
            class: s.class,
            verify: s.verify,
        })
        .collect()
}

/// One compiled token: its entry's index and its ASCII-lowercased bytes (never empty).
#[derive(Debug, Clone)]
struct Token {
    entry: usize,
    lower: Box<[u8]>,
}

/// Number of buckets tokens are spread over by their first two bytes (a power of two).
const BUCKETS: usize = 1024;

/// Bucket of a token or UA position starting with the (lowercased) bytes `a`, `b`.
fn bucket_of(a: u8, b: u8) -> usize {
    (usize::from(a) << 5 ^ usize::from(b)) & (BUCKETS - 1)
}

/// A catalog compiled for matching (lowercased tokens).
#[derive(Debug, Clone)]
pub struct Classifier {
    entries: Vec<BotEntry>,
    /// Tokens of two bytes or more, sorted by (bucket of their first two bytes, entry index).
    tokens: Vec<Token>,
    /// `tokens[starts[k]..starts[k + 1]]` are the tokens of bucket `k`.
    starts: Vec<usize>,
    /// One-byte tokens (none in the built-in catalog), sorted by entry index.
    short: Vec<Token>,
}

impl Classifier {
    /// Compiles `entries` (matched in order, first match wins).
    ///
    /// Tokens are lowercased (ASCII only; other bytes must match exactly). A token that is
    /// empty or only whitespace is dropped: it would match every User-Agent.
    pub fn new(entries: Vec<BotEntry>) -> Classifier {
        let (mut tokens, short): (Vec<Token>, Vec<Token>) = entries
            .iter()
            .enumerate()
            .flat_map(|(entry, e)| {
                e.ua_contains
                    .iter()
                    .filter(|t| !t.trim().is_empty())
                    .map(move |t| Token {
                        entry,
                        lower: t.as_bytes().to_ascii_lowercase().into_boxed_slice(),
                    })
            })
            .partition(|t| t.lower.len() >= 2);
        let key = |t: &Token| match *t.lower {
            [a, b, ..] => bucket_of(a, b),
            _ => 0,
        };
        // Within a bucket, earlier entries come first, so a scan can stop at the first token
        // whose entry is not better than the best match so far.
        tokens.sort_by_key(|t| (key(t), t.entry));
        let mut starts = vec![0usize; BUCKETS + 1];
        for t in &tokens {
            if let Some(s) = starts.get_mut(key(t) + 1) {
                *s += 1;
            }
        }
        // Prefix sums turn per-bucket counts into bucket boundaries.
        let mut acc = 0;
        for s in starts.iter_mut() {
            acc += *s;
            *s = acc;
        }
        Classifier {
            entries,
            tokens,
            starts,
            short,
        }
    }

    /// The entries in match order.
    pub fn entries(&self) -> &[BotEntry] {
        &self.entries
    }

    /// Classifies a raw User-Agent header value (`None` = header missing). Never panics.
    ///
    /// Missing, empty or whitespace-only: `script` with no bot. Otherwise the first catalog
    /// entry with a token occurring anywhere in the UA (ASCII case-insensitive) gives the bot
    /// and its class (`unverified_bot` if the entry needs verification); no match is `human`.
    pub fn classify(&self, ua: Option<&[u8]>) -> Classification<'_> {
        let ua = ua.unwrap_or_default();
        if ua.iter().all(|b| b.is_ascii_whitespace()) {
            return Classification {
                bot: None,
                class: Class::Script,
            };
        }
        match self.first_match(ua).and_then(|i| self.entries.get(i)) {
            Some(e) => Classification {
                bot: Some(e),
                class: if e.verify {
                    Class::UnverifiedBot
                } else {
                    e.class
                },
            },
            None => Classification {
                bot: None,
                class: Class::Human,
            },
        }
    }

    /// Index of the first entry (in catalog order) with a token occurring in `ua`.
    ///
    /// One pass over the UA; at each position only the tokens of the bucket of the next two
    /// bytes are compared (usually none), so the cost barely depends on the catalog size.
    fn first_match(&self, ua: &[u8]) -> Option<usize> {
        let mut best = usize::MAX;
        for (pos, pair) in ua.windows(2).enumerate() {
            let (Some(&a), Some(&b)) = (pair.first(), pair.get(1)) else {
                continue;
            };
            let k = bucket_of(a.to_ascii_lowercase(), b.to_ascii_lowercase());
            let (Some(&lo), Some(&hi)) = (self.starts.get(k), self.starts.get(k + 1)) else {
                continue;
            };
            if lo == hi {
                continue;
            }
            let (Some(bucket), Some(rest)) = (self.tokens.get(lo..hi), ua.get(pos..)) else {
                continue;
            };
            for t in bucket {
                if t.entry >= best {
                    break;
                }
                if starts_with_ignore_ascii_case(rest, &t.lower) {
                    best = t.entry;
                    break;
                }
            }
            if best == 0 {
                return Some(0);
            }
        }
        // One-byte tokens (user-supplied only): any occurrence of the byte.
        for t in &self.short {
            if t.entry >= best {
                break;
            }
            if ua
                .iter()
                .any(|h| t.lower.first() == Some(&h.to_ascii_lowercase()))
            {
                best = t.entry;
                break;
            }
        }
        (best != usize::MAX).then_some(best)
    }
}

/// Whether `hay` starts with `lower_needle` (already ASCII-lowercased), ignoring ASCII case.
fn starts_with_ignore_ascii_case(hay: &[u8], lower_needle: &[u8]) -> bool {
    hay.get(..lower_needle.len()).is_some_and(|h| {
        h.iter()
            .zip(lower_needle)
            .all(|(a, b)| a.to_ascii_lowercase() == *b)
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn class_index_is_the_position_in_all() {
        for (i, c) in Class::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
        }
    }

    use super::*;

    const GOOGLEBOT_DESKTOP: &str =
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
    const GOOGLEBOT_SMARTPHONE: &str = "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X \
        Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/134.0.6998.165 Mobile \
        Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
    const CHROME: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 \
        (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";

    fn builtin() -> Classifier {
        Classifier::new(builtin_catalog())
    }

    /// (bot id, class) for a UA through the built-in catalog.
    fn run(ua: &str) -> (Option<String>, Class) {
        let c = builtin();
        let r = c.classify(Some(ua.as_bytes()));
        (r.bot.map(|b| b.id.clone()), r.class)
    }

    fn entry(id: &str, tokens: &[&str], class: Class, verify: bool) -> BotEntry {
        BotEntry {
            id: id.to_owned(),
            ua_contains: tokens.iter().map(|t| (*t).to_owned()).collect(),
            class,
            verify,
        }
    }

    #[test]
    fn googlebot_desktop_is_unverified_googlebot() {
        assert_eq!(
            run(GOOGLEBOT_DESKTOP),
            (Some("googlebot".into()), Class::UnverifiedBot)
        );
    }

    #[test]
    fn googlebot_smartphone_is_unverified_googlebot() {
        assert_eq!(
            run(GOOGLEBOT_SMARTPHONE),
            (Some("googlebot".into()), Class::UnverifiedBot)
        );
    }

    #[test]
    fn googlebot_entry_claims_search_crawler_and_needs_verification() {
        let c = builtin();
        let bot = c.classify(Some(GOOGLEBOT_DESKTOP.as_bytes())).bot;
        assert_eq!(
            bot.map(|b| (b.class, b.verify)),
            Some((Class::SearchCrawler, true))
        );
    }

    #[test]
    fn googlebot_image_has_its_own_id() {
        assert_eq!(
            run("Googlebot-Image/1.0"),
            (Some("googlebot-image".into()), Class::UnverifiedBot)
        );
    }

    #[test]
    fn adsbot_google_is_not_googlebot() {
        let ua = "Mozilla/5.0 (Linux; Android 5.0; SM-G920A) AppleWebKit (KHTML, like Gecko) \
            Chrome Mobile Safari (compatible; AdsBot-Google-Mobile; \
            +http://www.google.com/mobile/adsbot.html)";
        assert_eq!(
            run(ua),
            (Some("adsbot-google".into()), Class::UnverifiedBot)
        );
    }

    #[test]
    fn carddav_sync_google_is_human() {
        assert_eq!(run("CardDAV-Sync (Google)"), (None, Class::Human));
    }

    #[test]
    fn specific_ai_tokens_beat_generic_ones() {
        let ids = [
            ("Mozilla/5.0 (compatible; OAI-SearchBot/1.0; +https://openai.com/searchbot)", "oai-searchbot"),
            ("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko); compatible; ChatGPT-User/1.0; +https://openai.com/bot", "chatgpt-user"),
            ("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko); compatible; GPTBot/1.2; +https://openai.com/gptbot", "gptbot"),
            ("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Perplexity-User/1.0; +https://perplexity.ai/perplexity-user)", "perplexity-user"),
            ("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; PerplexityBot/1.0; +https://perplexity.ai/perplexitybot)", "perplexitybot"),
            ("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Claude-User/1.0; +Claude-User@anthropic.com)", "claude-user"),
            ("Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; ClaudeBot/1.0; +claudebot@anthropic.com)", "claudebot"),
            ("DuckAssistBot/1.2; (+http://duckduckgo.com/duckassistbot.html)", "duckassistbot"),
            ("DuckDuckBot/1.1; (+http://duckduckgo.com/duckduckbot.html)", "duckduckbot"),
            ("Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)", "bingbot"),
            ("Mozilla/5.0 (Windows NT 6.1; WOW64) AppleWebKit/534+ (KHTML, like Gecko) BingPreview/1.0b", "bingpreview"),
        ];
        for (ua, id) in ids {
            assert_eq!(run(ua).0.as_deref(), Some(id), "{ua}");
        }
    }

    #[test]
    fn curl_is_script() {
        assert_eq!(run("curl/8.5.0"), (Some("script".into()), Class::Script));
    }

    #[test]
    fn missing_empty_and_blank_ua_are_script_without_bot() {
        let c = builtin();
        for ua in [
            None,
            Some(&b""[..]),
            Some(&b"   "[..]),
            Some(&b"\t \r\n"[..]),
        ] {
            let r = c.classify(ua);
            assert_eq!((r.bot, r.class), (None, Class::Script), "{ua:?}");
        }
    }

    #[test]
    fn chrome_is_human() {
        assert_eq!(run(CHROME), (None, Class::Human));
    }

    #[test]
    fn cubot_phone_is_human() {
        let ua = "Mozilla/5.0 (Linux; U; Android 4.2.1; en-gb; CUBOT ONE Build/JOP40D) \
            AppleWebKit/534.30 (KHTML, like Gecko) Version/4.0 Mobile Safari/534.30";
        assert_eq!(run(ua), (None, Class::Human));
    }

    #[test]
    fn non_utf8_bytes_are_matched_around() {
        let c = builtin();
        let ua = b"\xff\xfe Mozilla/5.0 (compatible; \xc3\x28 Googlebot/2.1) \x80";
        let r = c.classify(Some(ua));
        assert_eq!(
            (r.bot.map(|b| b.id.as_str()), r.class),
            (Some("googlebot"), Class::UnverifiedBot)
        );
        assert_eq!(c.classify(Some(b"\xff\xfe\x80\xc3")).class, Class::Human);
    }

    #[test]
    fn a_64_kib_ua_is_classified() {
        let c = builtin();
        let mut ua = vec![b'a'; 64 * 1024];
        assert_eq!(c.classify(Some(&ua)).class, Class::Human);
        let tail = b"GPTBot/1.2";
        let start = ua.len() - tail.len();
        ua[start..].copy_from_slice(tail);
        let r = c.classify(Some(&ua));
        assert_eq!(r.bot.map(|b| b.id.as_str()), Some("gptbot"));
        // A UA that is nothing but a token prefix, cut at the end, matches nothing.
        assert_eq!(c.classify(Some(b"Googlebo")).class, Class::Human);
    }

    #[test]
    fn matching_is_ascii_case_insensitive() {
        for ua in ["GOOGLEBOT/2.1", "googlebot/2.1", "gOoGlEbOt/2.1"] {
            assert_eq!(run(ua).0.as_deref(), Some("googlebot"), "{ua}");
        }
        let c = Classifier::new(vec![entry("x", &["MiXeD"], Class::OtherBot, false)]);
        assert_eq!(c.classify(Some(b"a mixed b")).class, Class::OtherBot);
    }

    #[test]
    fn first_entry_wins_not_first_position() {
        let c = Classifier::new(vec![
            entry("late-in-ua", &["zeta"], Class::AiTrainer, false),
            entry("early-in-ua", &["alpha"], Class::OtherBot, false),
        ]);
        let r = c.classify(Some(b"alpha ... zeta"));
        assert_eq!(
            (r.bot.map(|b| b.id.as_str()), r.class),
            (Some("late-in-ua"), Class::AiTrainer)
        );
        let r = c.classify(Some(b"alpha only"));
        assert_eq!(r.bot.map(|b| b.id.as_str()), Some("early-in-ua"));
    }

    #[test]
    fn one_byte_tokens_match() {
        let c = Classifier::new(vec![
            entry("long", &["zz"], Class::AiTrainer, false),
            entry("short", &["Q"], Class::OtherBot, false),
        ]);
        assert_eq!(
            c.classify(Some(b"aq")).bot.map(|b| b.id.as_str()),
            Some("short")
        );
        assert_eq!(
            c.classify(Some(b"q")).bot.map(|b| b.id.as_str()),
            Some("short")
        );
        assert_eq!(
            c.classify(Some(b"q zz")).bot.map(|b| b.id.as_str()),
            Some("long")
        );
        assert_eq!(c.classify(Some(b"z")).class, Class::Human);
    }

    #[test]
    fn verify_entries_are_unverified_bot() {
        let c = Classifier::new(vec![entry("v", &["vbot"], Class::SearchCrawler, true)]);
        assert_eq!(c.classify(Some(b"vbot/1")).class, Class::UnverifiedBot);
    }

    #[test]
    fn blank_tokens_never_match() {
        let c = Classifier::new(vec![
            entry("blank", &["", "   ", "\t"], Class::AiTrainer, false),
            entry("real", &["real"], Class::OtherBot, false),
        ]);
        assert_eq!(c.classify(Some(b"a   b\t c")).class, Class::Human);
        assert_eq!(
            c.classify(Some(b"a real   one")).bot.map(|b| b.id.as_str()),
            Some("real")
        );
        assert_eq!(c.entries().len(), 2);
    }

    #[test]
    fn non_ascii_tokens_match_bytes_exactly() {
        let c = Classifier::new(vec![entry("u", &["Ünï"], Class::OtherBot, false)]);
        assert_eq!(
            c.classify(Some("x Ünï y".as_bytes())).class,
            Class::OtherBot
        );
        assert_eq!(c.classify(Some(b"x \xff y")).class, Class::Human);
    }

    #[test]
    fn builtin_catalog_ids_are_unique_lowercase_and_tokens_nonblank() {
        let cat = builtin_catalog();
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
    fn robots_only_tokens_are_not_catalog_entries() {
        let cat = builtin_catalog();
        assert!(!cat
            .iter()
            .any(|e| e.id == "applebot-extended" || e.id == "google-extended"));
        // "Applebot-Extended" in a UA is still an Applebot claim.
        assert_eq!(run("Applebot-Extended/0.1").0.as_deref(), Some("applebot"));
    }

    #[test]
    fn class_names_round_trip() {
        for c in Class::ALL {
            assert_eq!(Class::parse(c.as_str()), Some(c));
        }
        assert_eq!(Class::parse("suspicious"), None);
    }
}
