//! The published-ranges contract (sidecar -> filter): the sidecar hands the filter the IP
//! ranges it verifies bots by, so that the filter decides range-verifiable claims itself,
//! also while the sidecar is down; only FCrDNS needs a callout.
//!
//! `GET /v1/ranges` -> `200`, `content-type: text/plain`, a document (below) and
//! `etag: "<generation>"`; with `?since=<generation>` (or `if-none-match: "<generation>"`)
//! equal to the current generation -> `304`, no body.
//!
//! The document, one item per line (`\n`; tokens separated by spaces):
//!
//! ```text
//! crawlguard-ranges 1 <generation>
//! set <prefix> <prefix> ...
//! bot <bot id> <out of range> <set>
//! end
//! ```
//!
//! - `1` is the format [`VERSION`]; `<generation>` is 16 lower-case hex digits, a hash of
//!   the rest of the document (the same ranges give the same generation, also after a
//!   sidecar restart).
//! - each `set` line is the prefixes of one bot's loaded range sources together
//!   (`<address>/<length>`, host bits clear, at least [`MIN_PREFIX_LEN`] bits, at most
//!   [`MAX_SET_ADDRESSES`] in all), numbered 0, 1, ... in order; bots with the
//!   same sources share a set. Ascending and disjoint (each prefix starts after the
//!   previous one ends) in the IPv6 address space, an IPv4 prefix `a.b.c.d/n` taken as
//!   `::ffff:a.b.c.d/(96+n)` (so IPv4 prefixes come before the usual IPv6 ones); the
//!   writer leaves contained prefixes out. An IPv6 prefix over `::ffff:0:0/96` is refused
//!   (the sidecar looks IPv4 clients up in IPv4 prefixes only), so the writer leaves a set
//!   holding one empty and its bots out.
//! - each `bot` line is one bot id the sidecar verifies by ranges, in ascending id order,
//!   with the index of its (earlier) `set` line and what an address outside it gets:
//!   `spoofed` (the bot has no FCrDNS domains: the sidecar says `spoofed`, method
//!   `ip_range`) or `fcrdns` (the sidecar decides by FCrDNS: ask it). Only bots with at
//!   least one loaded range source are listed; an address inside its bot's set is
//!   `verified` (method `ip_range`), as `GET /v1/verify` would answer.
//! - `end` closes the document, so a truncated one is refused.
//!
//! Compatibility rule (as for `GET /v1/verify`, [`crate::verify`]): a reader refuses a
//! document of another version, ignores lines of a kind it does not know and tokens after
//! the ones it knows on `crawlguard-ranges` and `bot` lines (tokens are separated by exactly
//! one space), and reads an out-of-range value
//! it does not know as `fcrdns` (ask the verifier: never a verdict it cannot justify). `set`
//! lines cannot grow: new data goes into a new kind of line. A change that an older reader
//! would misread gets a new version. A refused document is a verifier error for the reader,
//! which keeps the ranges it had.
//!
//! Bounds a reader enforces: [`MAX_BODY_BYTES`] and [`MAX_PREFIXES`].

use crate::bot_id::is_valid_bot_id;
use crate::verify::Verdict;
use std::net::IpAddr;

/// The path of the ranges endpoint.
pub const PATH: &str = "/v1/ranges";

/// The format version this crate writes and reads.
pub const VERSION: u32 = 1;

/// First token of a document.
const MAGIC: &str = "crawlguard-ranges";

/// Largest document a reader accepts, bytes (Google's and OpenAI's published files, 1,782
/// prefixes in the copies in `shared/data`, render to 34 KB).
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// Most prefixes (both families, all sets) a reader accepts (9 times those 1,782).
pub const MAX_PREFIXES: usize = 16_384;

/// Shortest prefix a range set may hold, bits, IPv4 and IPv6: no crawler vendor publishes
/// wider blocks (the widest in the published files in `shared/data` are /24 and /64), and
/// one wider (a typo, `0.0.0.0/0`, a compromised source) would verify every claimant. The
/// sidecar refuses a range file holding one, and a reader a document holding one.
pub const MIN_PREFIX_LEN: (u8, u8) = (8, 16);

/// Most addresses one set may cover, IPv4 and IPv6: a /8's and a /32's worth, about 1,000
/// times and 2^22 times the widest published set in `shared/data` (Google's user-triggered
/// fetchers: 16,896 IPv4 addresses, about 2^74 IPv6). Prefixes each long enough can still
/// cover everything side by side (256 /8s are all of IPv4); a set over this is refused like
/// one wide prefix.
pub const MAX_SET_ADDRESSES: (u128, u128) = (1 << 24, 1 << 96);

/// Addresses the intervals of [`key`]s in `set` cover, (IPv4, IPv6); an overlap counts
/// twice (a writer's set may overlap: the strict side).
pub fn coverage(set: &[(u128, u128)]) -> (u128, u128) {
    set.iter().fold((0u128, 0u128), |(v4, v6), &(first, last)| {
        let n = last.saturating_sub(first).saturating_add(1);
        if first >= MAPPED.0 && last <= MAPPED.1 {
            (v4.saturating_add(n), v6)
        } else {
            (v4, v6.saturating_add(n))
        }
    })
}

/// True when `set` covers at most [`MAX_SET_ADDRESSES`].
pub fn is_plausible_coverage(set: &[(u128, u128)]) -> bool {
    let (v4, v6) = coverage(set);
    v4 <= MAX_SET_ADDRESSES.0 && v6 <= MAX_SET_ADDRESSES.1
}

/// True when a prefix of `len` bits is long enough for a range set ([`MIN_PREFIX_LEN`]).
pub fn is_plausible_prefix_len(ipv4: bool, len: u8) -> bool {
    len >= if ipv4 {
        MIN_PREFIX_LEN.0
    } else {
        MIN_PREFIX_LEN.1
    }
}

/// The request target: `/v1/ranges`, or `/v1/ranges?since=<generation>` when the caller
/// holds a document of that generation.
pub fn request_path(since: Option<&str>) -> String {
    match since {
        Some(g) => format!("{PATH}?since={g}"),
        None => PATH.to_string(),
    }
}

/// A generation as written in a document, in `since` and in the `etag` (without quotes):
/// 16 lower-case hex digits.
pub fn generation_text(generation: u64) -> String {
    format!("{generation:016x}")
}

/// An address as [`PrefixSet`] keys it: IPv6 as its 128 bits, IPv4 as its IPv4-mapped
/// IPv6 address (`::ffff:a.b.c.d`, which is also how an IPv4-mapped client is looked up, as
/// the sidecar does).
pub fn key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// First and last address of `::ffff:0:0/96`, where IPv4 prefixes live in a [`PrefixSet`].
const MAPPED: (u128, u128) = (0xffff_0000_0000, 0xffff_ffff_ffff);

/// One set's prefixes as sorted, disjoint, inclusive intervals of [`key`]s (both families
/// in one table: 32 bytes per prefix); a lookup is a binary search.
pub type PrefixSet = Vec<(u128, u128)>;

/// True when `ip` is in one of `set`'s prefixes.
pub fn contains(set: &[(u128, u128)], ip: IpAddr) -> bool {
    let x = key(ip);
    let i = set.partition_point(|&(first, _)| first <= x);
    i > 0 && set.get(i - 1).is_some_and(|&(_, last)| x <= last)
}

/// What the sidecar answers for an address outside a bot's sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutOfRange {
    /// `spoofed`: the bot has no other method.
    Spoofed,
    /// `fcrdns` (or a value this reader does not know): ask the verifier.
    Fcrdns,
}

impl OutOfRange {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OutOfRange::Spoofed => "spoofed",
            OutOfRange::Fcrdns => "fcrdns",
        }
    }
}

/// One `bot` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotRanges {
    /// The bot id ([`is_valid_bot_id`]).
    pub id: String,
    /// What an address outside its set gets.
    pub out_of_range: OutOfRange,
    /// Index into [`Ranges::sets`].
    pub set: u32,
}

/// A parsed document: the table the filter decides claims from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ranges {
    /// The document's generation ([`generation_text`]; empty for no document).
    pub generation: String,
    /// The `set` lines, in order.
    pub sets: Vec<PrefixSet>,
    /// The `bot` lines, ascending by id.
    pub bots: Vec<BotRanges>,
}

impl Ranges {
    /// The verdict the sidecar would give for `ip` claiming `bot`, when the ranges decide
    /// it: `Verified` inside the bot's set, `Spoofed` outside it for a bot without FCrDNS;
    /// `None` for a bot not listed or one that FCrDNS decides outside its set.
    pub fn verdict(&self, ip: IpAddr, bot: &str) -> Option<Verdict> {
        // A scan: a few dozen ids, most of another length.
        let b = self.bots.iter().find(|b| b.id == bot)?;
        let set = self.sets.get(usize::try_from(b.set).ok()?)?;
        if contains(set, ip) {
            Some(Verdict::Verified)
        } else {
            (b.out_of_range == OutOfRange::Spoofed).then_some(Verdict::Spoofed)
        }
    }

    /// Number of prefixes of every set.
    pub fn prefixes(&self) -> usize {
        self.sets.iter().map(Vec::len).sum()
    }

    /// Bytes the table takes in memory: the intervals' capacity, the sets and the bot lines
    /// with their ids.
    pub fn table_bytes(&self) -> usize {
        let sets: usize = self
            .sets
            .iter()
            .map(|s| s.capacity() * std::mem::size_of::<(u128, u128)>())
            .sum();
        let bots: usize = self.bots.iter().map(|b| b.id.capacity()).sum();
        sets + self.sets.capacity() * std::mem::size_of::<PrefixSet>()
            + bots
            + self.bots.capacity() * std::mem::size_of::<BotRanges>()
    }
}

fn is_space(b: &u8) -> bool {
    *b == b' '
}

fn is_newline(b: &u8) -> bool {
    *b == b'\n'
}

/// Splits at one separator (one instance of the split code for lines and tokens alike).
fn split(s: &[u8], at: fn(&u8) -> bool) -> std::slice::Split<'_, u8, fn(&u8) -> bool> {
    s.split(at)
}

/// A decimal number of at most 9 digits.
#[inline(never)]
fn number(b: &[u8]) -> Option<u32> {
    if b.is_empty() || b.len() > 9 {
        return None;
    }
    b.iter().try_fold(0u32, |n, d| {
        d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
    })
}

#[inline(never)]
fn text(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or_default()
}

/// Parses a prefix token into its interval of [`key`]s; `None` for a bad one: host bits
/// set (the writer clears them: a sidecar that mixed up address and length must not widen
/// a range), shorter than [`MIN_PREFIX_LEN`], or an IPv6 prefix over IPv4-mapped addresses
/// (the sidecar never looks IPv4 clients up in IPv6 prefixes).
#[inline(never)]
fn parse_prefix(token: &[u8]) -> Option<(u128, u128)> {
    let slash = token.iter().position(|b| *b == b'/')?;
    let ip = text(token.get(..slash)?).parse::<IpAddr>().ok()?;
    let mut len = number(token.get(slash + 1..)?)?;
    if !is_plausible_prefix_len(ip.is_ipv4(), u8::try_from(len).unwrap_or(u8::MAX)) {
        return None;
    }
    if ip.is_ipv4() {
        len = len.checked_add(96).filter(|l| *l <= 128)?;
    }
    if len > 128 {
        return None;
    }
    let host = u128::MAX.checked_shr(len).unwrap_or(0);
    if key(ip) & host != 0 {
        return None;
    }
    let first = key(ip);
    let last = first | host;
    let over_mapped = first <= MAPPED.1 && last >= MAPPED.0;
    (ip.is_ipv4() || !over_mapped).then_some((first, last))
}

/// The generation of a document, read from its first line alone (a reader that holds this
/// generation need not parse the rest).
pub fn generation_of(body: &[u8]) -> Result<&str, &'static str> {
    let rest = body
        .strip_prefix(b"crawlguard-ranges 1 ")
        .ok_or("not a version 1 ranges document")?;
    let g = text(rest.get(..16).unwrap_or_default());
    let ends = matches!(rest.get(16), Some(b'\n' | b' '));
    match u64::from_str_radix(g, 16) {
        Ok(_) if ends && !g.starts_with('+') => Ok(g),
        _ => Err("bad generation"),
    }
}

/// Parses a document (see the module docs for the rules and the compatibility rule). The
/// error says which rule the document breaks.
pub fn parse(body: &[u8]) -> Result<Ranges, &'static str> {
    if body.len() > MAX_BODY_BYTES {
        return Err("larger than MAX_BODY_BYTES (262144)");
    }
    let mut r = Ranges {
        generation: generation_of(body)?.to_string(),
        ..Ranges::default()
    };
    let mut prefixes = 0usize;
    for line in split(body, is_newline).skip(1) {
        let mut t = split(line, is_space);
        match t.next().unwrap_or_default() {
            b"end" => return Ok(r),
            b"set" => {
                let mut set = PrefixSet::default();
                for token in t {
                    prefixes += 1;
                    if prefixes > MAX_PREFIXES {
                        return Err("more than MAX_PREFIXES (16384) prefixes");
                    }
                    let iv = parse_prefix(token).ok_or("bad prefix")?;
                    if set.last().is_some_and(|&(_, last)| iv.0 <= last) {
                        return Err("prefixes not ascending and disjoint");
                    }
                    set.push(iv);
                }
                if !is_plausible_coverage(&set) {
                    return Err("a set covers more than MAX_SET_ADDRESSES");
                }
                r.sets.push(set);
            }
            b"bot" => {
                let id = text(t.next().unwrap_or_default());
                if !is_valid_bot_id(id) || r.bots.last().is_some_and(|b| b.id.as_str() >= id) {
                    return Err("bad bot id (or not ascending)");
                }
                let out_of_range = match t.next().ok_or("bad bot line")? {
                    b"spoofed" => OutOfRange::Spoofed,
                    _ => OutOfRange::Fcrdns,
                };
                let set = number(t.next().unwrap_or_default())
                    .filter(|s| usize::try_from(*s).is_ok_and(|s| s < r.sets.len()))
                    .ok_or("bad set index")?;
                r.bots.push(BotRanges {
                    id: id.to_string(),
                    out_of_range,
                    set,
                });
            }
            _ => {}
        }
    }
    Err("no end line (truncated)")
}

/// One prefix as a writer has it: an address and a length (host bits may be set).
pub type Prefix = (IpAddr, u8);

/// Writes a document of `sets` (each the prefixes of a bot's range sources, any order,
/// overlaps allowed) and `bots` (`(id, out of range, index into sets)`, any order):
/// prefixes sorted per family with contained ones dropped, bots sorted by id. Returns the
/// generation and the text. The writer's side (the sidecar); never called by the filter.
pub fn render(sets: &[Vec<Prefix>], bots: &[(String, OutOfRange, usize)]) -> (u64, String) {
    use std::fmt::Write as _;
    let mut rest = String::new();
    let mut unpublishable = Vec::new();
    for set in sets {
        // (first key, last key reversed: a containing prefix before the ones it contains,
        // which are then dropped, address, length).
        let mut ivs: Vec<(u128, std::cmp::Reverse<u128>, IpAddr, u8)> = set
            .iter()
            .map(|&(addr, len)| {
                let width = if addr.is_ipv4() { 32 } else { 128 };
                let len = u32::from(len).min(width);
                let shift = 128 - (width - len);
                let mask = u128::MAX.checked_shl(128 - shift).unwrap_or(0);
                let first = key(addr) & mask;
                let net = match addr {
                    IpAddr::V4(_) => IpAddr::from(std::net::Ipv4Addr::from(first as u32)),
                    IpAddr::V6(_) => IpAddr::from(std::net::Ipv6Addr::from(first)),
                };
                (first, std::cmp::Reverse(first | !mask), net, len as u8)
            })
            .collect();
        ivs.sort();
        // An IPv6 prefix over IPv4-mapped addresses, one shorter than MIN_PREFIX_LEN, or a
        // set over MAX_SET_ADDRESSES cannot be published (a reader refuses it): the set's
        // bots are left out, so the sidecar decides them.
        let intervals: Vec<(u128, u128)> = ivs
            .iter()
            .map(|&(first, std::cmp::Reverse(last), ..)| (first, last))
            .collect();
        let over_mapped = !is_plausible_coverage(&intervals)
            || ivs
                .iter()
                .any(|&(first, std::cmp::Reverse(last), net, len)| {
                    (net.is_ipv6() && first <= MAPPED.1 && last >= MAPPED.0)
                        || !is_plausible_prefix_len(net.is_ipv4(), len)
                });
        unpublishable.push(over_mapped);
        rest.push_str("set");
        let mut last: Option<u128> = None;
        for (_, std::cmp::Reverse(end), net, len) in ivs {
            if over_mapped || last.is_some_and(|l| end <= l) {
                continue;
            }
            last = Some(end);
            let _ = write!(rest, " {net}/{len}");
        }
        rest.push('\n');
    }
    let mut bots: Vec<&(String, OutOfRange, usize)> = bots
        .iter()
        .filter(|b| unpublishable.get(b.2) == Some(&false))
        .collect();
    bots.sort_by(|a, b| a.0.cmp(&b.0));
    for (id, out, set) in bots {
        let _ = writeln!(rest, "bot {id} {} {set}", out.as_str());
    }
    rest.push_str("end\n");
    // FNV-1a, 64 bits: stable across processes and versions (unlike std's hasher).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in rest.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let generation = h.max(1);
    let text = format!("{MAGIC} {VERSION} {}\n{rest}", generation_text(generation));
    (generation, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        let (a, l) = s.split_once('/').unwrap_or((s, "32"));
        (
            a.parse().unwrap_or(IpAddr::from([0, 0, 0, 0])),
            l.parse().unwrap_or(0),
        )
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
    }

    fn doc() -> (u64, String) {
        render(
            &[
                vec![
                    p("66.249.64.0/27"),
                    p("66.249.64.7/32"),
                    p("2001:4860:4801:10::/64"),
                    p("66.249.64.33/27"),
                    p("192.0.2.0/24"),
                ],
                vec![p("52.230.152.0/24")],
            ],
            &[
                ("gptbot".into(), OutOfRange::Spoofed, 1),
                ("googlebot".into(), OutOfRange::Fcrdns, 0),
            ],
        )
    }

    #[test]
    fn render_sorts_drops_contained_prefixes_and_clears_host_bits() {
        let (g, text) = doc();
        let body = text.split_once('\n').map(|(_, b)| b).unwrap_or_default();
        assert_eq!(
            body,
            "set 66.249.64.0/27 66.249.64.32/27 192.0.2.0/24 2001:4860:4801:10::/64\n\
             set 52.230.152.0/24\n\
             bot googlebot fcrdns 0\n\
             bot gptbot spoofed 1\n\
             end\n"
        );
        assert_eq!(
            text.lines().next(),
            Some(format!("crawlguard-ranges 1 {}", generation_text(g)).as_str())
        );
        // The same ranges in another order: the same document and generation.
        let again = render(
            &[
                vec![
                    p("192.0.2.0/24"),
                    p("66.249.64.33/27"),
                    p("2001:4860:4801:10::/64"),
                    p("66.249.64.0/27"),
                ],
                vec![p("52.230.152.0/24")],
            ],
            &[
                ("googlebot".into(), OutOfRange::Fcrdns, 0),
                ("gptbot".into(), OutOfRange::Spoofed, 1),
            ],
        );
        assert_eq!(again, (g, text));
    }

    #[test]
    fn parse_reads_what_render_writes_and_decides_as_the_sidecar() {
        let (g, text) = doc();
        let r = parse(text.as_bytes()).expect("own document");
        assert_eq!(r.generation, generation_text(g));
        assert_eq!(r.prefixes(), 5);
        assert_eq!(
            r.sets
                .first()
                .map(|s| s.get(..3).unwrap_or_default().to_vec()),
            Some(vec![
                (0xffff_42f9_4000, 0xffff_42f9_401f),
                (0xffff_42f9_4020, 0xffff_42f9_403f),
                (0xffff_c000_0200, 0xffff_c000_02ff)
            ])
        );
        for (addr, bot, want) in [
            ("66.249.64.1", "googlebot", Some(Verdict::Verified)),
            ("66.249.64.63", "googlebot", Some(Verdict::Verified)),
            ("::ffff:66.249.64.63", "googlebot", Some(Verdict::Verified)),
            ("2001:4860:4801:10::1", "googlebot", Some(Verdict::Verified)),
            ("2001:4860:4801:11::1", "googlebot", None),
            ("66.249.64.64", "googlebot", None),
            ("0.0.0.0", "googlebot", None),
            ("255.255.255.255", "googlebot", None),
            ("52.230.152.7", "gptbot", Some(Verdict::Verified)),
            ("66.249.64.1", "gptbot", Some(Verdict::Spoofed)),
            ("52.230.152.7", "bingbot", None),
            ("52.230.152.7", "", None),
        ] {
            assert_eq!(r.verdict(ip(addr), bot), want, "{addr} {bot}");
        }
    }

    #[test]
    fn request_paths() {
        assert_eq!(request_path(None), "/v1/ranges");
        assert_eq!(
            request_path(Some(&generation_text(0xab))),
            "/v1/ranges?since=00000000000000ab"
        );
    }

    #[test]
    fn newer_writers_additions_are_ignored() {
        let text = "crawlguard-ranges 1 00000000000000ff extra\n\
                    note anything at all\n\
                    set 10.0.0.0/8 2001:db8::/32\n\
                    bot a web_bot_auth 0 more tokens\n\
                    bot b spoofed 0\n\
                    end\n\
                    after the end\n";
        let r = parse(text.as_bytes()).expect("compatible additions");
        assert_eq!(r.generation, "00000000000000ff");
        assert_eq!(r.verdict(ip("11.0.0.1"), "a"), None);
        assert_eq!(r.verdict(ip("2001:db8::1"), "a"), Some(Verdict::Verified));
        assert_eq!(r.verdict(ip("11.0.0.1"), "b"), Some(Verdict::Spoofed));
        assert_eq!(r.verdict(ip("10.1.2.3"), "b"), Some(Verdict::Verified));
    }

    #[test]
    fn every_broken_document_is_refused() {
        let h = "crawlguard-ranges 1 00000000000000ff\n";
        let set = "set 10.0.0.0/8\n";
        let cases: Vec<(String, &str)> = vec![
            (String::new(), "not a version 1 ranges document"),
            (
                "{\"prefixes\":[]}".into(),
                "not a version 1 ranges document",
            ),
            (
                "crawlguard-ranges 2 00000000000000ff\nend\n".into(),
                "not a version 1 ranges document",
            ),
            (
                "crawlguard-ranges  1 00000000000000ff\nend\n".into(),
                "not a version 1 ranges document",
            ),
            ("crawlguard-ranges 1 ff\nend\n".into(), "bad generation"),
            (
                "crawlguard-ranges 1\nend\n".into(),
                "not a version 1 ranges document",
            ),
            (
                "crawlguard-ranges 1 zzzzzzzzzzzzzzzz\nend\n".into(),
                "bad generation",
            ),
            (format!("{h}{set}"), "no end line (truncated)"),
            (format!("{h}{set}en"), "no end line (truncated)"),
            (format!("{h}set 10.0.0.0/33\nend\n"), "bad prefix"),
            // Wider than a vendor publishes (hostile review: these made every claimant of
            // googlebot verified), and host bits set (`66.249.66.1/0` read as everything).
            (format!("{h}set 0.0.0.0/0 2000::/3\nend\n"), "bad prefix"),
            (format!("{h}set 10.0.0.0/7\nend\n"), "bad prefix"),
            (format!("{h}set 2000::/15\nend\n"), "bad prefix"),
            (format!("{h}set 66.249.66.1/0\nend\n"), "bad prefix"),
            (format!("{h}set 66.249.66.1/24\nend\n"), "bad prefix"),
            (format!("{h}set 2001:db8::1/64\nend\n"), "bad prefix"),
            (
                format!(
                    "{h}set {}\nend\n",
                    (0..=255)
                        .map(|a| format!("{a}.0.0.0/8"))
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
                "a set covers more than MAX_SET_ADDRESSES",
            ),
            (
                format!("{h}set 10.0.0.0/8 11.0.0.0/32\nend\n"),
                "a set covers more than MAX_SET_ADDRESSES",
            ),
            (format!("{h}set 10.0.0.0\nend\n"), "bad prefix"),
            (format!("{h}set ::/129\nend\n"), "bad prefix"),
            (format!("{h}set x/8\nend\n"), "bad prefix"),
            (format!("{h}set 10.0.0.0/-1\nend\n"), "bad prefix"),
            (
                format!("{h}set 10.0.0.0/8  11.0.0.0/8\nend\n"),
                "bad prefix",
            ),
            (
                format!("{h}set 11.0.0.0/8 10.0.0.0/8\nend\n"),
                "prefixes not ascending and disjoint",
            ),
            (
                format!("{h}set 10.0.0.0/8 10.1.0.0/16\nend\n"),
                "prefixes not ascending and disjoint",
            ),
            (
                format!("{h}{set}bot Googlebot fcrdns 0\nend\n"),
                "bad bot id (or not ascending)",
            ),
            (
                format!("{h}{set}bot\nend\n"),
                "bad bot id (or not ascending)",
            ),
            (
                format!("{h}{set}bot b spoofed 0\nbot a spoofed 0\nend\n"),
                "bad bot id (or not ascending)",
            ),
            (
                format!("{h}{set}bot a spoofed 0\nbot a spoofed 0\nend\n"),
                "bad bot id (or not ascending)",
            ),
            (format!("{h}{set}bot a\nend\n"), "bad bot line"),
            (format!("{h}{set}bot a spoofed\nend\n"), "bad set index"),
            (format!("{h}{set}bot a spoofed 1\nend\n"), "bad set index"),
            (format!("{h}bot a spoofed 0\n{set}end\n"), "bad set index"),
            (format!("{h}{set}bot a spoofed x\nend\n"), "bad set index"),
            (
                format!("{h}{set}bot a spoofed 99999999999\nend\n"),
                "bad set index",
            ),
        ];
        for (body, want) in cases {
            assert_eq!(parse(body.as_bytes()), Err(want), "{body:?}");
        }
        assert_eq!(parse(b"\xff\xfe"), Err("not a version 1 ranges document"));
        // Bytes that are not UTF-8 in a token make it a bad one.
        let mut bad = format!("{h}set 10.0.0.0/8").into_bytes();
        bad.extend_from_slice(b"\xff\nend\n");
        assert_eq!(parse(&bad).err(), Some("bad prefix"));
        let huge = vec![b' '; MAX_BODY_BYTES + 1];
        assert_eq!(parse(&huge), Err("larger than MAX_BODY_BYTES (262144)"));
        let many: Vec<String> = (0..=MAX_PREFIXES)
            .map(|i| format!("10.{}.{}.0/24", i / 256, i % 256))
            .collect();
        let body = format!("{h}set {}\nend\n", many.join(" "));
        assert!(body.len() <= MAX_BODY_BYTES);
        assert_eq!(
            parse(body.as_bytes()),
            Err("more than MAX_PREFIXES (16384) prefixes")
        );
        // Exactly the bounds: accepted.
        let body = format!("{h}set {}\nend\n", many[..MAX_PREFIXES].join(" "));
        assert_eq!(
            parse(body.as_bytes()).map(|r| r.prefixes()),
            Ok(MAX_PREFIXES)
        );
    }

    #[test]
    fn the_bounds_in_the_messages_are_the_constants() {
        assert_eq!(MAX_BODY_BYTES, 262_144);
        assert_eq!(MAX_PREFIXES, 16_384);
    }

    #[test]
    fn a_set_over_ipv4_mapped_addresses_is_left_out_with_its_bots() {
        let (_, text) = render(
            &[vec![p("::/0")], vec![p("10.0.0.0/8")]],
            &[
                ("a".into(), OutOfRange::Spoofed, 0),
                ("b".into(), OutOfRange::Spoofed, 1),
            ],
        );
        let body = text.split_once('\n').map(|(_, b)| b).unwrap_or_default();
        assert_eq!(body, "set\nset 10.0.0.0/8\nbot b spoofed 1\nend\n");
        let r = parse(text.as_bytes()).expect("valid");
        assert_eq!(r.verdict(ip("2001:db8::1"), "a"), None);
        assert_eq!(r.verdict(ip("10.0.0.1"), "b"), Some(Verdict::Verified));
        assert_eq!(
            r.verdict(ip("::ffff:10.0.0.1"), "b"),
            Some(Verdict::Verified)
        );
        assert_eq!(r.verdict(ip("::10.0.0.1"), "b"), Some(Verdict::Spoofed));
    }

    #[test]
    fn an_empty_document_is_valid_and_decides_nothing() {
        let (_, text) = render(&[], &[]);
        let r = parse(text.as_bytes()).expect("empty");
        assert_eq!((r.sets.len(), r.bots.len()), (0, 0));
        assert_eq!(r.verdict(ip("10.0.0.1"), "gptbot"), None);
    }
}
