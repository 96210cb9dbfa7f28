//! User-Agent classification, the matcher: a UA string becomes a *bot id* and a *class*.
//!
//! The catalog ([`crate::catalog`]) is an ordered list of [`BotEntry`]; each entry lists
//! case-insensitive substrings of the `User-Agent`. The first entry (in catalog order) with
//! any matching token wins, so specific tokens (`Googlebot-Image`, `AdsBot-Google`, `OAI-SearchBot`) are listed before the
//! generic ones they would otherwise be confused with (`Googlebot`, `GPTBot`). A UA that matches
//! nothing is `human`; an empty, missing or whitespace-only UA is `script`.
//!
//! Matching works on raw bytes (the header may be any bytes, not UTF-8) with an ASCII
//! case-insensitive comparison and never allocates: tokens are lowercased once at
//! construction and bucketed by their first byte, so each UA byte only looks at the few tokens
//! that can start there.

use crate::catalog::BotEntry;

/// The class a classification gives (defined in [`crate::class`]).
pub use crate::class::Class;

/// The result of classifying one User-Agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification<'a> {
    /// The matched catalog entry, if any.
    pub bot: Option<&'a BotEntry>,
    /// The class the request gets now: the entry's class, or `UnverifiedBot` when the entry
    /// has `verify: true` (the verifier path may upgrade it later).
    pub class: Class,
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
    use super::*;
    use crate::catalog::builtin_catalog;

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
    fn robots_only_tokens_match_like_any_user_agent() {
        // "Applebot-Extended" and "Google-Extended" are robots.txt tokens, not catalog
        // entries: in a UA they are still an Applebot / Google claim.
        assert_eq!(run("Applebot-Extended/0.1").0.as_deref(), Some("applebot"));
        assert_eq!(
            run("Google-Extended/1.0").0.as_deref(),
            Some("google-other-agent")
        );
    }
}
