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
//! dense transition table over byte classes ([`Dfa`]), so a UA costs one table step per byte
//! whatever the catalog's size; the platform sections (a few dozen bytes) go through a second,
//! small automaton of the platform tokens.

use crate::identity::catalog::{builtin_human_rule, BotEntry, BuiltinHumanRule};

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

/// What a token stands for: a catalog entry (the lowest index found wins) or flag bits
/// (all found are kept).
#[derive(Debug, Clone, Copy)]
enum Out {
    Entry(u32),
    Flags(u8),
}

/// `Dfa::entry` of a state that ends no entry token.
const NO_ENTRY: u32 = u32::MAX;

/// A transition table: `u16` entries while the state ids fit in 15 bits (every realistic
/// catalog), else `u32`. The top bit of an entry marks a target state where a token ends, so
/// the scan reads one table entry per byte.
#[derive(Debug, Clone)]
enum Trans {
    Small(Vec<u16>),
    Large(Vec<u32>),
}

/// An entry of a transition table: a state id and the "a token ends there" mark.
trait StateId: Copy {
    /// The target state.
    fn index(self) -> usize;
    /// Whether a token ends at the target state.
    fn marked(self) -> bool;
}

impl StateId for u16 {
    fn index(self) -> usize {
        usize::from(self & 0x7fff)
    }
    fn marked(self) -> bool {
        self & 0x8000 != 0
    }
}

impl StateId for u32 {
    fn index(self) -> usize {
        // State ids are indexes of a Vec, so they fit a usize.
        (self & 0x7fff_ffff) as usize
    }
    fn marked(self) -> bool {
        self & 0x8000_0000 != 0
    }
}

/// A match the scan reports: the state's outputs at one position.
#[derive(Debug, Clone, Copy)]
struct Hit {
    /// Index of the last byte of the match (the UA's length for the virtual end space).
    end: usize,
    /// Lowest entry index ending here, or [`NO_ENTRY`].
    entry: u32,
    /// Flag bits of the tokens ending here.
    flags: u8,
    /// Length of the longest token ending here that carries `len_flag`.
    len: u16,
}

/// An Aho-Corasick automaton over ASCII-lowercased bytes, as a dense DFA: `trans[state *
/// stride + class]` is the next state, where `class` is the byte's class (the distinct bytes
/// the tokens use, case folded, each have one; every other byte shares class 0).
#[derive(Debug, Clone)]
struct Dfa {
    /// Class of every byte (ASCII upper case folded onto lower case).
    classes: [u8; 256],
    /// Number of classes.
    stride: usize,
    trans: Trans,
    /// Per state: lowest entry index of a token ending here (or at a suffix of it).
    entry: Vec<u32>,
    /// Per state: flag bits of the tokens ending here (or at a suffix).
    flags: Vec<u8>,
    /// Per state: length of the longest token with the `len_flag` bit ending here.
    len: Vec<u16>,
}

impl Dfa {
    /// Compiles `tokens`. Tokens are lowercased (ASCII only; other bytes must match exactly);
    /// a token that is empty or only whitespace is dropped (it would match every UA). For
    /// tokens carrying `len_flag`, each state records the longest one's length (to find where
    /// an anchor starts).
    // Indexing here is over this function's own arrays: `classes` (256) by a byte, the
    // states it pushed (< children.len()) and classes it assigned (< stride). Config tokens
    // only decide the automaton's shape, never an index.
    #[allow(clippy::indexing_slicing)]
    fn new<'a>(tokens: impl IntoIterator<Item = (Out, &'a str)>, len_flag: u8) -> Dfa {
        let tokens: Vec<(Out, Vec<u8>)> = tokens
            .into_iter()
            .filter(|(_, t)| !t.trim().is_empty())
            .map(|(o, t)| (o, t.as_bytes().to_ascii_lowercase()))
            .collect();
        // Byte classes: 0 for bytes no token uses.
        let mut classes = [0u8; 256];
        let mut stride = 1usize;
        for (_, t) in &tokens {
            for &b in t {
                if classes[usize::from(b)] == 0 && stride < 256 {
                    classes[usize::from(b)] = stride as u8;
                    stride += 1;
                }
            }
        }
        for upper in b'A'..=b'Z' {
            classes[usize::from(upper)] = classes[usize::from(upper.to_ascii_lowercase())];
        }
        // The trie, with sparse children while building.
        let mut children: Vec<Vec<(u8, usize)>> = vec![Vec::new()];
        let mut entry = vec![NO_ENTRY];
        let mut flags = vec![0u8];
        let mut len = vec![0u16];
        for (out, t) in &tokens {
            let mut s = 0usize;
            for &b in t {
                let c = classes[usize::from(b)];
                s = match children[s].iter().find(|(k, _)| *k == c) {
                    Some(&(_, next)) => next,
                    None => {
                        let next = children.len();
                        children.push(Vec::new());
                        entry.push(NO_ENTRY);
                        flags.push(0);
                        len.push(0);
                        children[s].push((c, next));
                        next
                    }
                };
            }
            match *out {
                Out::Entry(e) => entry[s] = entry[s].min(e),
                Out::Flags(f) => {
                    flags[s] |= f;
                    if f & len_flag != 0 {
                        len[s] = len[s].max(u16::try_from(t.len()).unwrap_or(u16::MAX));
                    }
                }
            }
        }
        // Breadth-first: failure links, dense transitions, outputs merged along the links.
        let states = children.len();
        let mut trans = vec![0u32; states * stride];
        let mut fail = vec![0usize; states];
        let mut queue = std::collections::VecDeque::new();
        for &(c, next) in &children[0] {
            trans[usize::from(c)] = next as u32;
            queue.push_back(next);
        }
        while let Some(s) = queue.pop_front() {
            let f = fail[s];
            entry[s] = entry[s].min(entry[f]);
            flags[s] |= flags[f];
            len[s] = len[s].max(len[f]);
            for c in 0..stride {
                trans[s * stride + c] = trans[f * stride + c];
            }
            for &(c, next) in &children[s] {
                fail[next] = trans[f * stride + usize::from(c)] as usize;
                trans[s * stride + usize::from(c)] = next as u32;
                queue.push_back(next);
            }
        }
        // Mark every transition into a state where a token ends.
        let ends = |t: u32| {
            let t = t as usize;
            entry.get(t).is_some_and(|&e| e != NO_ENTRY) || flags.get(t).is_some_and(|&f| f != 0)
        };
        let trans = match states <= 0x7fff {
            true => Trans::Small(
                trans
                    .iter()
                    .map(|&t| t as u16 | if ends(t) { 0x8000 } else { 0 })
                    .collect(),
            ),
            false => Trans::Large(
                trans
                    .iter()
                    .map(|&t| t | if ends(t) { 0x8000_0000 } else { 0 })
                    .collect(),
            ),
        };
        Dfa {
            classes,
            stride,
            trans,
            entry,
            flags,
            len,
        }
    }

    /// Runs `hay` (and one space after it, with `end_space`) through the automaton and calls
    /// `visit` at every position where a token ends; stops when `visit` returns true.
    fn scan(&self, hay: &[u8], end_space: bool, visit: impl FnMut(Hit) -> bool) {
        match &self.trans {
            Trans::Small(t) => self.scan_with(t, hay, end_space, visit),
            Trans::Large(t) => self.scan_with(t, hay, end_space, visit),
        }
    }

    fn scan_with<T: StateId>(
        &self,
        trans: &[T],
        hay: &[u8],
        end_space: bool,
        mut visit: impl FnMut(Hit) -> bool,
    ) {
        let next = |s: usize, b: u8| {
            // A byte always indexes the 256 classes (the check compiles away).
            let c = usize::from(self.classes.get(usize::from(b)).copied().unwrap_or(0));
            trans.get(s * self.stride + c).copied()
        };
        let mut s = 0usize;
        for (end, &b) in hay.iter().enumerate() {
            let Some(t) = next(s, b) else {
                s = 0;
                continue;
            };
            s = t.index();
            if t.marked() && visit(self.hit(s, end)) {
                return;
            }
        }
        if end_space {
            if let Some(t) = next(s, b' ').filter(|t| t.marked()) {
                visit(self.hit(t.index(), hay.len()));
            }
        }
    }

    /// The outputs of state `s`, reached at `end`.
    fn hit(&self, s: usize, end: usize) -> Hit {
        Hit {
            end,
            entry: self.entry.get(s).copied().unwrap_or(NO_ENTRY),
            flags: self.flags.get(s).copied().unwrap_or(0),
            len: self.len.get(s).copied().unwrap_or(0),
        }
    }
}

/// Flags of the main automaton (the human rule's tokens).
const FORM: u8 = 1;
const BROWSER: u8 = 2;
const ANCHOR: u8 = 4;
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
        Classifier {
            entries,
            main,
            platforms,
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
        self.main.scan(ua, true, |hit| {
            best = best.min(hit.entry);
            flags |= hit.flags;
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
        if let Some(e) = first {
            return Classification {
                bot: Some(e),
                class: if e.verify {
                    Class::UnverifiedBot
                } else {
                    e.class
                },
            };
        }
        if self.non_browser.class == Class::Human || self.browser_shaped(ua, flags, anchor) {
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

    /// The human rule for a UA no entry matched ([`BuiltinHumanRule`]), given the main scan's flags
    /// and the start of the first anchor.
    fn browser_shaped(&self, ua: &[u8], flags: u8, anchor: Option<usize>) -> bool {
        if flags & FORM != 0 {
            return true;
        }
        let mut platforms = 0u8;
        for start in [Some(0), anchor.filter(|&a| a > 0)].into_iter().flatten() {
            let Some(section) = platform_section(ua, start) else {
                continue;
            };
            self.platforms.scan(section, false, |hit| {
                platforms |= hit.flags;
                platforms & DEVICE != 0
            });
            if platforms & DEVICE != 0 {
                return true;
            }
        }
        platforms & DESKTOP != 0 && flags & BROWSER != 0
    }
}

/// The platform section at or after `start`: the bytes between the first `(` from `start` and
/// the next `)` (or the end of the UA); `None` without a `(`.
fn platform_section(ua: &[u8], start: usize) -> Option<&[u8]> {
    let rest = ua.get(start..)?;
    let open = rest.iter().position(|&b| b == b'(')?;
    let inner = rest.get(open + 1..)?;
    let close = inner.iter().position(|&b| b == b')').unwrap_or(inner.len());
    inner.get(..close)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::catalog::builtin_catalog;

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
        // Measured: 2,767 states x 46 byte classes of u16 (with the "token ends" bit), 254,564
        // bytes per worker. A bound, not the exact figure, so that catalog edits need no
        // change here; a catalog that outgrows it should make the table smaller first.
        assert!(matches!(c.main.trans, Trans::Small(_)));
        assert!(states < 4_000, "{states} states");
        assert!(bytes < 400_000, "{bytes} bytes");
        assert_eq!(states, c.main.entry.len());
        assert!(c.platforms.entry.len() < 300);
    }
}
