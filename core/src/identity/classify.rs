//! User-Agent classification, the matcher: a UA string becomes a *bot id* and a *class*.
//!
//! The catalog ([`crate::identity::catalog`]) is an ordered list of [`BotEntry`]; each entry lists
//! case-insensitive substrings of the `User-Agent`. The first entry (in catalog order) with
//! any matching token wins, so specific tokens (`Googlebot-Image`, `AdsBot-Google`,
//! `OAI-SearchBot`) are listed before the generic ones they would otherwise be confused with
//! (`Googlebot`, `GPTBot`), and the generic bot markers (`declared-bot`) come last. The end
//! of the User-Agent counts as one space, so a token ending in a space (`"tbot "`) also
//! matches at the very end.
//!
//! A UA that matches no entry is `human` only when it is *browser-shaped* by the catalog's
//! human rule ([`BuiltinHumanRule`]); otherwise it is a bot of unknown purpose: the rule's
//! non-browser bot id (`non-browser`) with its class (`other_bot`, configurable). An empty,
//! missing or whitespace-only UA is `script`.
//!
//! Matching works on raw bytes (the header may be any bytes, not UTF-8), ASCII
//! case-insensitively, and never allocates. Every token (the entries' and the human rule's
//! browser tokens, forms and anchors) is compiled once into one Aho-Corasick automaton with a
//! dense transition table over byte classes (`Dfa`), so a UA costs one table step per byte
//! whatever the catalog's size; the platform sections (a few dozen bytes) go through a second,
//! small automaton of the platform tokens.

use crate::identity::catalog::{builtin_human_rule, BotEntry, BuiltinHumanRule};
use crate::identity::ua_automaton::{Dfa, Out, NO_ENTRY};

/// The class a classification gives (defined in [`crate::identity::class`]).
pub use crate::identity::class::Class;

/// The result of classifying one User-Agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification<'a> {
    /// The matched catalog entry; the non-browser entry ([`Classifier::non_browser`]) for a
    /// UA that is neither a catalog bot nor browser-shaped; `None` for `human` and for a
    /// missing or blank UA.
    pub bot: Option<&'a BotEntry>,
    /// The class the request gets now: the entry's class, or `UnverifiedBot` when the entry
    /// has `verify: true` (the verifier path may upgrade it later).
    pub class: Class,
}

/// Flags of the main automaton (the human rule's tokens).
const FORM: u8 = 1;
const BROWSER: u8 = 2;
const ANCHOR: u8 = 4;
/// A generic marker that counts inside the platform section too.
const DECLARATION: u8 = 8;
/// Flags of the platform automaton.
const DEVICE: u8 = 1;
const DESKTOP: u8 = 2;

/// A catalog compiled for matching (lowercased tokens), with the human rule.
#[derive(Debug, Clone)]
pub struct Classifier {
    entries: Vec<BotEntry>,
    /// Every entry token, and the human rule's browser forms, browser tokens and anchors.
    main: Dfa,
    /// The human rule's device and desktop platforms.
    platforms: Dfa,
    /// The entry a UA that is neither a catalog bot nor browser-shaped gets.
    non_browser: BotEntry,
    /// Index of the generic bot markers' entry ([`BuiltinHumanRule::generic_markers_id`]),
    /// or [`NO_ENTRY`] when the catalog has none.
    generic: u32,
}

/// Most generic-marker matches remembered per User-Agent; a User-Agent with more is a bot
/// whatever its platform section says.
const MAX_GENERIC_HITS: usize = 8;

/// Where the generic bot markers matched: the index of each match's last byte.
#[derive(Debug, Default)]
struct GenericHits {
    ends: [usize; MAX_GENERIC_HITS],
    len: usize,
    /// More matches than [`MAX_GENERIC_HITS`], or a declaration
    /// ([`BuiltinHumanRule::markers_in_platform_section`]): the markers count wherever they are.
    overflow: bool,
}

impl GenericHits {
    fn push(&mut self, end: usize) {
        match self.ends.get_mut(self.len) {
            Some(slot) => {
                *slot = end;
                self.len += 1;
            }
            None => self.overflow = true,
        }
    }

    fn ends(&self) -> &[usize] {
        self.ends.get(..self.len).unwrap_or_default()
    }
}

impl Classifier {
    /// Compiles `entries` (matched in order, first match wins) with the built-in human rule
    /// ([`crate::identity::catalog::builtin_human_rule`]) and its non-browser class.
    ///
    /// Tokens are lowercased (ASCII only; other bytes must match exactly). A token that is
    /// empty or only whitespace is dropped: it would match every User-Agent.
    pub fn new(entries: Vec<BotEntry>) -> Classifier {
        let human: &BuiltinHumanRule = builtin_human_rule();
        let entry_tokens = entries.iter().enumerate().flat_map(|(i, e)| {
            let out = Out::Entry(u32::try_from(i).unwrap_or(NO_ENTRY - 1));
            e.ua_contains.iter().map(move |t| (out, t.as_str()))
        });
        let rule_tokens = [
            (FORM, human.browser_forms),
            (BROWSER, human.browser_tokens),
            (ANCHOR, human.platform_section_after),
            (DECLARATION, human.markers_in_platform_section),
        ]
        .into_iter()
        .flat_map(|(flag, list)| list.iter().map(move |t| (Out::Flags(flag), *t)));
        let main = Dfa::new(entry_tokens.chain(rule_tokens), ANCHOR);
        let platforms = Dfa::new(
            human
                .device_platforms
                .iter()
                .map(|t| (Out::Flags(DEVICE), *t))
                .chain(
                    human
                        .desktop_platforms
                        .iter()
                        .map(|t| (Out::Flags(DESKTOP), *t)),
                ),
            0,
        );
        let generic = entries
            .iter()
            .position(|e| e.id == human.generic_markers_id)
            .and_then(|i| u32::try_from(i).ok())
            .unwrap_or(NO_ENTRY);
        Classifier {
            entries,
            main,
            platforms,
            generic,
            non_browser: BotEntry {
                id: human.non_browser_id.to_string(),
                ua_contains: Vec::new(),
                class: human.non_browser_class,
                verify: false,
            },
        }
    }

    /// The same classifier with `class` for User-Agents that are neither catalog bots nor
    /// browser-shaped (configuration `non_browser_class`). `Class::Human` turns the human rule
    /// off: such a UA is then `human`, as every unmatched UA was before the rule existed.
    pub fn with_non_browser_class(mut self, class: Class) -> Classifier {
        self.non_browser.class = class;
        self
    }

    /// The entries in match order.
    pub fn entries(&self) -> &[BotEntry] {
        &self.entries
    }

    /// The entry of a User-Agent that is neither a catalog bot nor browser-shaped: the human
    /// rule's non-browser id with the configured class (no tokens, never verified).
    pub fn non_browser(&self) -> &BotEntry {
        &self.non_browser
    }

    /// Classifies a raw User-Agent header value (`None` = header missing). Never panics.
    ///
    /// Missing, empty or whitespace-only: `script` with no bot. Otherwise the first catalog
    /// entry with a token occurring anywhere in the UA (ASCII case-insensitive; the end of the
    /// UA reads as a space) gives the bot and its class (`unverified_bot` if the entry needs
    /// verification). No match: `human` if the UA is browser-shaped ([`BuiltinHumanRule`]), else
    /// [`Classifier::non_browser`] and its class.
    pub fn classify(&self, ua: Option<&[u8]>) -> Classification<'_> {
        let ua = ua.unwrap_or_default();
        if ua.iter().all(|b| b.is_ascii_whitespace()) {
            return Classification {
                bot: None,
                class: Class::Script,
            };
        }
        let mut best = NO_ENTRY;
        let mut flags = 0u8;
        let mut anchor: Option<usize> = None;
        let mut generic_hits = GenericHits::default();
        self.main.scan(ua, true, |hit| {
            best = best.min(hit.entry);
            flags |= hit.flags;
            if hit.entry == self.generic && hit.entry != NO_ENTRY {
                match hit.flags & DECLARATION {
                    0 => generic_hits.push(hit.end),
                    _ => generic_hits.overflow = true,
                }
            }
            if hit.flags & ANCHOR != 0 {
                let start = (hit.end + 1).saturating_sub(usize::from(hit.len));
                anchor = Some(anchor.map_or(start, |a| a.min(start)));
            }
            best == 0
        });
        let first = usize::try_from(best)
            .ok()
            .filter(|_| best != NO_ENTRY)
            .and_then(|i| self.entries.get(i));
        // The human rule's shape is only needed without a named entry (the generic markers
        // may be device names, and a UA no entry matched may be human).
        let shape = match first {
            Some(_) if best != self.generic || generic_hits.overflow => None,
            _ => Some(self.browser_shape(ua, flags, anchor)),
        };
        // Generic markers inside the platform section of a phone, tablet or television are
        // its model's name (CUBOT, "M bot 54", MagentaTV), not a declaration. (A desktop's
        // platform section names no model.)
        let markers_are_device_names = shape.as_ref().is_some_and(|shape| {
            best == self.generic
                && shape.device
                && generic_hits
                    .ends()
                    .iter()
                    .all(|&end| shape.sections.iter().flatten().any(|r| r.contains(&end)))
        });
        if let Some(e) = first.filter(|_| !markers_are_device_names) {
            return Classification {
                bot: Some(e),
                class: if e.verify {
                    Class::UnverifiedBot
                } else {
                    e.class
                },
            };
        }
        let browser = shape.is_some_and(|s| s.browser);
        if self.non_browser.class == Class::Human || browser {
            return Classification {
                bot: None,
                class: Class::Human,
            };
        }
        Classification {
            bot: Some(&self.non_browser),
            class: self.non_browser.class,
        }
    }

    /// The human rule for a UA no entry matched ([`BuiltinHumanRule`]), given the main scan's
    /// flags and the start of the first anchor; with the parenthesised platform sections it
    /// looked at.
    fn browser_shape(&self, ua: &[u8], flags: u8, anchor: Option<usize>) -> BrowserShape {
        let starts = [Some(0), anchor.filter(|&a| a > 0)];
        let sections = starts.map(|start| start.and_then(|s| platform_section(ua, s)));
        // A User-Agent whose comments lost their parentheses ("Mozilla/5.0 Linux; Android
        // 7.0; ...", "Dalvik/2.1.0 Linux; U; Android ...") or that has none ("iPhone14Plus",
        // "FBAN/FBIOS;...;FBDV/iPhone10,3"): its head, up to the first `(`, is a platform
        // section too (generic markers there still count).
        let head = 0..ua.iter().position(|&b| b == b'(').unwrap_or(ua.len());
        let mut platforms = 0u8;
        for range in sections.iter().flatten().chain([&head]) {
            let Some(section) = ua.get(range.clone()) else {
                continue;
            };
            self.platforms.scan(section, false, |hit| {
                platforms |= hit.flags;
                platforms & DEVICE != 0
            });
            if platforms & DEVICE != 0 {
                break;
            }
        }
        let browser = flags & FORM != 0
            || platforms & DEVICE != 0
            || (platforms & DESKTOP != 0 && flags & BROWSER != 0);
        BrowserShape {
            browser,
            device: platforms & DEVICE != 0,
            sections,
        }
    }
}

/// Whether a User-Agent no entry matched is browser-shaped, whether by a device platform,
/// and its parenthesised platform sections (byte ranges of the User-Agent).
struct BrowserShape {
    browser: bool,
    device: bool,
    sections: [Option<std::ops::Range<usize>>; 2],
}

/// The platform section at or after `start`: the byte range after the first `(` from
/// `start` up to and including the next `)` (or to the end of the UA); `None` without a `(`.
fn platform_section(ua: &[u8], start: usize) -> Option<std::ops::Range<usize>> {
    let rest = ua.get(start..)?;
    let open = start + rest.iter().position(|&b| b == b'(')? + 1;
    let inner = ua.get(open..)?;
    let close = inner
        .iter()
        .position(|&b| b == b')')
        .map_or(inner.len(), |i| i + 1);
    Some(open..open + close)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::catalog::builtin_catalog;
    use crate::identity::ua_automaton::Trans;

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
    fn a_sync_client_is_not_a_browser() {
        // Before the human rule this was `human`: no catalog token, so "a browser".
        assert_eq!(
            run("CardDAV-Sync (Google)"),
            (Some("non-browser".into()), Class::OtherBot)
        );
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
        assert_eq!(c.classify(Some(b"\xff\xfe\x80\xc3")).class, Class::OtherBot);
        let chrome_with_noise = [b"\xff\xfe".as_slice(), CHROME.as_bytes(), b"\x80"].concat();
        assert_eq!(c.classify(Some(&chrome_with_noise)).class, Class::Human);
    }

    #[test]
    fn a_64_kib_ua_is_classified() {
        let c = builtin();
        let mut ua = vec![b'a'; 64 * 1024];
        assert_eq!(c.classify(Some(&ua)).class, Class::OtherBot);
        let mut browser = CHROME.as_bytes().to_vec();
        browser.resize(64 * 1024, b'a');
        assert_eq!(c.classify(Some(&browser)).class, Class::Human);
        let tail = b"GPTBot/1.2";
        let start = ua.len() - tail.len();
        ua[start..].copy_from_slice(tail);
        let r = c.classify(Some(&ua));
        assert_eq!(r.bot.map(|b| b.id.as_str()), Some("gptbot"));
        // A UA that is nothing but a token prefix, cut at the end, matches no entry (and is
        // no browser either).
        let r = c.classify(Some(b"Googlebo"));
        assert_eq!(
            (r.bot.map(|b| b.id.as_str()), r.class),
            (Some("non-browser"), Class::OtherBot)
        );
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
        assert_eq!(c.classify(Some(b"z")).class, Class::OtherBot);
        assert_eq!(c.classify(Some(CHROME.as_bytes())).class, Class::Human);
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
        assert_eq!(c.classify(Some(b"a   b\t c")).class, Class::OtherBot);
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
        assert_eq!(c.classify(Some(b"x \xff y")).class, Class::OtherBot);
    }

    #[test]
    fn robots_only_tokens_match_like_any_user_agent() {
        // "Applebot-Extended" and "Google-Extended" are robots.txt tokens, not catalog
        // entries: in a UA they are still an Applebot / Google claim.
        assert_eq!(run("Applebot-Extended/0.1").0.as_deref(), Some("applebot"));
        assert_eq!(
            run("Google-Extended/1.0").0.as_deref(),
            Some("google-other-agent")
        );
    }

    /// Browsers and apps on personal devices, one per browser form of the human rule.
    const BROWSERS: &[&str] = &[
        CHROME,
        "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.2 Safari/605.1.15",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Edg/120.0.0.0",
        "Mozilla/5.0 (Windows NT 10.0; Trident/7.0; rv:11.0) like Gecko",
        "Mozilla/4.0 (compatible; MSIE 8.0; Windows NT 5.1; Trident/4.0)",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.2 Mobile/15E148 Safari/604.1",
        "Mozilla/5.0 (Linux; Android 14; SM-S911B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/23.0 Chrome/115.0.0.0 Mobile Safari/537.36",
        "Mozilla/5.0 (PLAYSTATION 3; 3.55)",
        "Opera/9.80 (Windows NT 6.1; U; en) Presto/2.10.229 Version/11.62",
        "Opera/9.80 (J2ME/MIDP; Opera Mini/9.80 (J2ME/22.478; U; en) Presto/2.5.25 Version/10.54",
        "NOKIA6120c/UC Browser7.4.0.65/28/352",
        "SAMSUNG-C3053/1.0 Openwave/6.2.3 Profile/MIDP-2.0 Configuration/CLDC-1.1 UP.Browser/6.2.3.3.c.1.101 (GUI) MMP/2.0",
        "Pinterest/3.2 CFNetwork/672.0.8 Darwin/14.0.0",
        "Dalvik/2.1.0 (Linux; U; Android 11; SM-A125F Build/RP1A.200720.012)",
        "BrightSign/9.0.211 (XC4055) Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) QtWebEngine/5.15.2 Chrome/87.0.4280.144 Safari/537.36",
        "Midori/0.2 (X11; Linux; U; en-us) WebKit/531.2",
    ];

    #[test]
    fn browser_shaped_user_agents_are_human() {
        for ua in BROWSERS {
            assert_eq!(run(ua), (None, Class::Human), "{ua}");
        }
    }

    #[test]
    fn user_agents_without_a_browser_shape_are_non_browser_bots() {
        for ua in [
            "Luminary/1.0",
            "Acme-Sync/2.0",
            "Zapier",
            "Mozilla/5.0 (compatible; Dataprovider)",
            "Mozilla/5.0 (compatible; FooReader/1.0)",
            // A desktop platform without a browser engine or product.
            "Mozilla/5.0 (X11; Linux x86_64) FooFetch/1.0",
            // A platform only in a later comment (no Mozilla/ before it).
            "Foo/1.0 (build 7) Bar/2 (Windows NT 10.0) AppleWebKit/537.36",
            "Mozilla/5.0",
            "-",
        ] {
            assert_eq!(
                run(ua),
                (Some("non-browser".into()), Class::OtherBot),
                "{ua}"
            );
        }
    }

    #[test]
    fn generic_bot_markers_count_inside_a_browser_shaped_user_agent() {
        for tail in [
            " SWIMGBot",
            " moatbot",
            " Foo/1.0 (+https://foo.example/bot)",
            " Foo/1.0 (foo.com)",
            " (compatible; FooAgent)",
            " FeedFetcher-Foo",
            " Foo Link Preview",
            " Foo-Uptime-Monitor",
            " SecurityScanner/2",
        ] {
            let ua = format!("{CHROME}{tail}");
            assert_eq!(
                run(&ua),
                (Some("declared-bot".into()), Class::OtherBot),
                "{ua}"
            );
        }
        // "cubot" (a phone make) is not "<letter>bot", at the end either.
        let phone = "Mozilla/5.0 (Linux; Android 9; CUBOT P30 Build/PPR1.180610.011) \
            AppleWebKit/537.36 (KHTML, like Gecko) Chrome/99.0 Mobile Safari/537.36 CUBOT";
        assert_eq!(run(phone), (None, Class::Human));
    }

    #[test]
    fn generic_words_inside_the_platform_section_are_device_names() {
        // device-detector fixtures: phone and TV models named like markers.
        for ua in [
            "Mozilla/5.0 (Linux; Android 7.0; M bot 54) AppleWebKit/537.36 (KHTML, like Gecko) \
             Chrome/78.0.3904.96 Mobile Safari/537.36",
            "Mozilla/5.0 (Linux; U; Android 4.2.2; it-it; S222 Build/CUBOT) AppleWebKit/534.30 \
             (KHTML, like Gecko) Version/4.0 Mobile Safari/534.30",
            "Mozilla/5.0 (Linux; Android 13; Spider 8) AppleWebKit/537.36 (KHTML, like Gecko) \
             Chrome/124.0.0.0 Safari/537.36",
            "Mozilla/5.0 (Linux; Android 12; MagentaTV Box Build/STTC.220803.001; wv) \
             AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/99.0 Safari/537.36",
        ] {
            assert_eq!(run(ua), (None, Class::Human), "{ua}");
        }
        // Outside the platform section the same words still count.
        let tail = format!("{CHROME} M bot 54");
        assert_eq!(run(&tail), (Some("declared-bot".into()), Class::OtherBot));
        // Without a browser shape they count too.
        assert_eq!(
            run("Foo/1.0 (Spider 8)"),
            (Some("declared-bot".into()), Class::OtherBot)
        );
    }

    #[test]
    fn declarations_count_inside_the_platform_section() {
        // device-detector bots.yml: a product token, a crawler's name, an address, a contact.
        for ua in [
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64; BDCbot/1.0; +http://bigweb.example/faq) \
             AppleWebKit/537.36 (KHTML, like Gecko) Chrome/69.0.3497.100 Safari/537.36",
            "Mozilla/5.0 (iPhone; Y!J-BRY/YATSH crawler) AppleWebKit/605.1.15",
            "Mozilla/5.0 (Windows; U; Windows NT 6.1; en; rv:1.9.1.3; MySpaceScraper) \
             Gecko/20090824 Firefox/3.5.3",
            "Mozilla/4.0 (compatible; MSIE 5.5; SuperSpider/139; Windows 98)",
            "Mozilla/5.0 (compatible; um-IC/1.0; mailto: x@example.net; Windows NT 6.1; \
             rv:40.0) Gecko/20100101 Firefox/40.1",
        ] {
            assert_eq!(
                run(ua),
                (Some("declared-bot".into()), Class::OtherBot),
                "{ua}"
            );
        }
    }

    #[test]
    fn app_identifiers_are_not_web_addresses() {
        // Reverse-DNS bundle ids in in-app browsers (device-detector fixtures).
        for ua in [
            format!("{CHROME} [air.com.A888poker/1.0]"),
            format!("{CHROME} com.ionicframework.tornv2301860"),
            "com.google.ios.youtube/17.39.4 (iPad4,2; U; CPU iOS 12_5_5 like Mac OS X)".into(),
        ] {
            assert_eq!(run(&ua), (None, Class::Human), "{ua}");
        }
        // A host name still is one.
        for ua in [format!("{CHROME} (foo.com)"), format!("{CHROME} foo.io/1")] {
            assert_eq!(
                run(&ua),
                (Some("declared-bot".into()), Class::OtherBot),
                "{ua}"
            );
        }
    }

    #[test]
    fn user_agents_that_lost_their_parentheses_keep_their_platform() {
        for ua in [
            "Mozilla/5.0 Linux; Android 7.0; BQ-5201 AppleWebKit/537.36 KHTML, like Gecko \
             Chrome/73.0.3683.90 Mobile Safari/537.36",
            "Dalvik/2.1.0 Linux; U; Android 8.1.0; LM-Q725K Build/OPM1.171019.019",
            "iPhone14Plus",
            "FBAN/FBIOS;FBAV/182.0.0.42.80;FBDV/iPhone10,3;FBMD/iPhone;FBSN/iOS",
            "Lynx/2.8.9rel.1 libwww-FM/2.14 SSL-MM/1.4.1 OpenSSL/1.1.1d",
            "Mozilla/5.0 (CrKey armv7l 1.4.15250) AppleWebKit/537.36 (KHTML, like Gecko) \
             Chrome/31.0.1650.0 Safari/537.36",
        ] {
            assert_eq!(run(ua), (None, Class::Human), "{ua}");
        }
        // The head's generic markers still count: it is no parenthesised section.
        assert_eq!(
            run("FooBot/1.0 Android"),
            (Some("declared-bot".into()), Class::OtherBot)
        );
    }

    #[test]
    fn the_end_of_the_user_agent_reads_as_a_space() {
        assert_eq!(run("acmebot").0.as_deref(), Some("declared-bot"));
        assert_eq!(run("AcmeBot/1.0").0.as_deref(), Some("declared-bot"));
        let c = Classifier::new(vec![entry("x", &["end "], Class::AiTrainer, false)]);
        assert_eq!(c.classify(Some(b"the end")).class, Class::AiTrainer);
        assert_eq!(c.classify(Some(b"the end ")).class, Class::AiTrainer);
        assert_eq!(c.classify(Some(b"the endx")).class, Class::OtherBot);
        // Only one space: a token ending in two does not match at the end.
        let c = Classifier::new(vec![entry("x", &["end  "], Class::AiTrainer, false)]);
        assert_eq!(c.classify(Some(b"the end")).class, Class::OtherBot);
    }

    #[test]
    fn headless_and_automation_browsers_are_script() {
        for ua in [
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/120.0.0.0 Safari/537.36",
            "Mozilla/5.0 (Unknown; Linux x86_64) AppleWebKit/538.1 (KHTML, like Gecko) PhantomJS/2.1.1 Safari/538.1",
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Cypress/13.6.0 Chrome/114.0.5735.289 Electron/25.8.4 Safari/537.36",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36 Puppeteer",
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/69.0.3464.0 Safari/537.36 Chrome-Lighthouse",
            "Mozilla/5.0 (linux) AppleWebKit/537.36 (KHTML, like Gecko) jsdom/16.2.2",
        ] {
            assert_eq!(run(ua).1, Class::Script, "{ua}");
        }
        assert_eq!(run(BROWSERS[0]).1, Class::Human);
    }

    #[test]
    fn the_non_browser_class_is_configurable() {
        let c = builtin().with_non_browser_class(Class::Script);
        let r = c.classify(Some(b"Luminary/1.0"));
        assert_eq!(
            (r.bot.map(|b| b.id.as_str()), r.class),
            (Some("non-browser"), Class::Script)
        );
        assert_eq!(c.non_browser().class, Class::Script);
        // `human` switches the rule off: every unmatched UA is human again.
        let c = builtin().with_non_browser_class(Class::Human);
        let r = c.classify(Some(b"Luminary/1.0"));
        assert_eq!((r.bot, r.class), (None, Class::Human));
        // Catalog bots are unaffected either way.
        assert_eq!(c.classify(Some(b"curl/8.5.0")).class, Class::Script);
    }

    #[test]
    fn user_catalogs_keep_the_human_rule() {
        let c = Classifier::new(vec![entry("acme", &["acme"], Class::OtherBot, false)]);
        assert_eq!(c.classify(Some(CHROME.as_bytes())).class, Class::Human);
        assert_eq!(c.classify(Some(b"acme/1")).class, Class::OtherBot);
        let r = c.classify(Some(b"curl/8.5.0"));
        assert_eq!(r.bot.map(|b| b.id.as_str()), Some("non-browser"));
    }

    #[test]
    fn the_builtin_automaton_stays_small() {
        let c = builtin();
        let (states, bytes) = match &c.main.trans {
            Trans::Small(t) => (t.len() / c.main.stride, t.len() * 2),
            Trans::Large(t) => (t.len() / c.main.stride, t.len() * 4),
        };
        // Measured: 2,811 states x 47 byte classes of u16 (with the "token ends" bit), 264,234
        // bytes per worker; 331 platform states. A bound, not the exact figure, so that catalog edits need no
        // change here; a catalog that outgrows it should make the table smaller first.
        assert!(matches!(c.main.trans, Trans::Small(_)));
        assert!(states < 4_000, "{states} states");
        assert!(bytes < 400_000, "{bytes} bytes");
        assert_eq!(states, c.main.entry.len());
        assert!(c.platforms.entry.len() < 400, "{}", c.platforms.entry.len());
    }
}
