//! Client address: from Envoy's downstream address or `x-forwarded-for`, grouped by prefix.

use crate::config::{ClientIpConfig, IpSource};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Parses one address as found in Envoy's `source.address` property or an XFF entry:
/// `1.2.3.4`, `1.2.3.4:5678`, `::1`, `[::1]`, `[::1]:443`, `fe80::1%eth0` (zone dropped),
/// surrounding whitespace and quotes ignored. IPv4-mapped IPv6 becomes IPv4.
/// Returns `None` for anything else (`unknown`, obfuscated RFC 7239 ids, garbage, non-UTF-8).
pub fn parse_addr(raw: &[u8]) -> Option<IpAddr> {
    if let Some(v4) = dotted_quad_with_port(raw) {
        return Some(IpAddr::V4(v4));
    }
    parse_addr_text(raw)
}

/// The common form of Envoy's `source.address` for an IPv4 client, `a.b.c.d:port`, read
/// without text handling: it is parsed on every request, and [`parse_addr_text`] (UTF-8
/// check, trims, splits, the standard parser) cost the module several times more. `None`
/// whenever the input is anything else, a leading zero or an octet over 255 included: then
/// [`parse_addr_text`] decides (which agrees wherever this gives an address: the test
/// `the_dotted_quad_fast_path_agrees_with_the_text_rules`).
fn dotted_quad_with_port(raw: &[u8]) -> Option<Ipv4Addr> {
    // The text rules' cap (this form has nothing they would trim first).
    if raw.len() > 64 {
        return None;
    }
    let mut octets = [0u8; 4];
    let mut filled = 0usize;
    let mut value = 0u16;
    let mut digits = 0u8;
    let mut end = raw.len();
    for (at, &b) in raw.iter().enumerate() {
        match b {
            b'0'..=b'9' if digits < 3 && !(digits == 1 && value == 0) => {
                value = value * 10 + u16::from(b - b'0');
                digits += 1;
            }
            b'.' | b':' if digits > 0 => {
                *octets.get_mut(filled)? = u8::try_from(value).ok()?;
                filled += 1;
                (value, digits) = (0, 0);
                if b == b':' {
                    end = at;
                    break;
                }
            }
            _ => return None,
        }
    }
    if end == raw.len() {
        // No port: the last octet ends the input.
        *octets.get_mut(filled)? = u8::try_from(value).ok().filter(|_| digits > 0)?;
        filled += 1;
    } else if raw.get(end + 1..)?.iter().any(|b| !b.is_ascii_digit()) {
        // Anything but a port after the colon: the text rules decide.
        return None;
    }
    (filled == 4).then_some(Ipv4Addr::from(octets))
}

/// [`parse_addr`] by the text rules (every form it accepts).
fn parse_addr_text(raw: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(raw).ok()?.trim().trim_matches('"');
    if s.is_empty() || s.len() > 64 {
        return None;
    }
    let host = if let Some(rest) = s.strip_prefix('[') {
        // [v6] or [v6]:port
        rest.split(']').next()?
    } else if s.matches(':').count() == 1 {
        // v4:port
        s.split(':').next()?
    } else {
        s
    };
    // Drop an IPv6 zone id: it names a local interface, not a different client.
    let host = host.split('%').next()?;
    let ip: IpAddr = host.parse().ok()?;
    Some(ip.to_canonical())
}

/// The entry `hops` places from the right of an `x-forwarded-for` value (1 = rightmost).
/// `None` when there are fewer entries or that entry does not parse.
pub fn from_xff(xff: &[u8], hops: u32) -> Option<IpAddr> {
    let hops = usize::try_from(hops).ok()?.checked_sub(1)?;
    let entry = xff.rsplit(|b| *b == b',').nth(hops)?;
    parse_addr(entry)
}

/// The client address of a request per `cfg`: the XFF entry when configured and present,
/// else the downstream address. `None` if neither parses (keyed as "unknown client").
pub fn client_ip(
    cfg: &ClientIpConfig,
    remote: Option<&[u8]>,
    xff: Option<&[u8]>,
) -> Option<IpAddr> {
    configured_xff(cfg, xff).or_else(|| remote.and_then(parse_addr))
}

/// The client address the `x-forwarded-for` value `xff` gives under `cfg` (`source: xff`,
/// the entry `xff_trusted_hops` from the right); `None` under `source: remote_address`, or
/// when there is no such entry: then the downstream address is the client's
/// ([`client_ip`]). Read first, so the downstream address is asked for only when needed.
pub fn configured_xff(cfg: &ClientIpConfig, xff: Option<&[u8]>) -> Option<IpAddr> {
    if cfg.source != IpSource::Xff {
        return None;
    }
    xff.and_then(|x| from_xff(x, cfg.xff_trusted_hops))
}

/// The address masked to the configured prefix length: the bucket key of a client.
pub fn masked(ip: IpAddr, cfg: &ClientIpConfig) -> IpAddr {
    mask(ip, cfg.ipv4_prefix_len, cfg.ipv6_prefix_len)
}

/// The address masked to a limit's own prefix lengths (`limits[].ipv4_prefix_len`,
/// `limits[].ipv6_prefix_len`).
pub fn masked_to(ip: IpAddr, prefix: crate::config::AddressPrefix) -> IpAddr {
    mask(ip, prefix.ipv4_len, prefix.ipv6_len)
}

/// `ip` masked to its first `v4_len` (IPv4) or `v6_len` (IPv6) bits.
fn mask(ip: IpAddr, v4_len: u8, v6_len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let len = u32::from(v4_len.min(32));
            let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(bits & mask))
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let len = u32::from(v6_len.min(128));
            let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(bits & mask))
        }
    }
}

/// Prefix length of an IPv4 client's address group: a /24, the smallest block routed on
/// the Internet.
pub const GROUP_IPV4_PREFIX_LEN: u8 = 24;
/// Prefix length of an IPv6 client's address group: a /48, a site's usual allocation.
pub const GROUP_IPV6_PREFIX_LEN: u8 = 48;

/// The address group of `ip` (a client address, maybe already masked to its prefix): `ip`
/// masked to its /24 (IPv4) or /48 (IPv6), so a prefix already wider than that is its own
/// group. The per-worker fallback charges a client that finds no room of its own to its
/// group's bucket ([`crate::store::local_store`]): one bucket per group, whatever the number of
/// addresses in it.
pub fn group(ip: IpAddr) -> IpAddr {
    mask(ip, GROUP_IPV4_PREFIX_LEN, GROUP_IPV6_PREFIX_LEN)
}

/// What a client's concurrency is counted by (a cost-based limit's places in flight,
/// `limits[].cost.max_in_flight`): an IPv4 client's address prefix as given (`ip` is already
/// masked to `client_ip.ipv4_prefix_len`), an IPv6 client's [`group`] (its /48, one site:
/// a client holding a /48 has 65,536 /64s, each a bucket of its own, but one set of places).
pub fn concurrency_prefix(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(_) => group(ip),
    }
}

/// Fingerprint of `ip`'s [`group`] under a limit whose own fingerprint is `limit_fp` (a
/// seeded hash, secret with the seed): two groups of one limit never share one, and groups
/// of two limits share one only if the limits' fingerprints happen to differ by the two
/// groups' bits (chance 2^-64). Cheap (a few multiplications): it is made for every
/// address key of every request.
pub fn group_fp(ip: IpAddr, limit_fp: u64) -> u64 {
    // The group's bits, tagged by family: an IPv4 /24 (32 bits), an IPv6 /48 (48 bits).
    let bits = match group(ip) {
        IpAddr::V4(v4) => (1 << 56) | u64::from(u32::from(v4)),
        IpAddr::V6(v6) => (2 << 56) | (u128::from(v6) >> 80) as u64,
    };
    // splitmix64's finaliser: a bijection, so distinct inputs stay distinct.
    let mut x = limit_fp ^ bits;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }

    fn xff_cfg(hops: u32) -> ClientIpConfig {
        ClientIpConfig {
            source: IpSource::Xff,
            xff_trusted_hops: hops,
            ..ClientIpConfig::default()
        }
    }

    #[test]
    fn parses_envoy_source_address_forms() {
        assert_eq!(parse_addr(b"127.0.0.2:53211"), Some(ip("127.0.0.2")));
        assert_eq!(parse_addr(b"[::1]:443"), Some(ip("::1")));
        assert_eq!(parse_addr(b"[2001:db8::7]"), Some(ip("2001:db8::7")));
        assert_eq!(parse_addr(b"2001:db8::7"), Some(ip("2001:db8::7")));
        assert_eq!(parse_addr(b" 10.0.0.1 "), Some(ip("10.0.0.1")));
        assert_eq!(parse_addr(b"fe80::1%eth0"), Some(ip("fe80::1")));
        assert_eq!(parse_addr(b"[fe80::1%25eth0]:80"), Some(ip("fe80::1")));
        assert_eq!(parse_addr(b"::ffff:192.0.2.1"), Some(ip("192.0.2.1")));
        assert_eq!(parse_addr(b"unknown"), None);
        assert_eq!(parse_addr(b"_hidden"), None);
        assert_eq!(parse_addr(b""), None);
        assert_eq!(parse_addr(b"\xff\xfe"), None);
        assert_eq!(parse_addr(b"1.2.3.4.5"), None);
        assert_eq!(parse_addr(b"[::1"), Some(ip("::1")));
        assert_eq!(parse_addr("9".repeat(100).as_bytes()), None);
    }

    /// The fast path gives an address only where the text rules give the same one: every
    /// combination of 13 octet spellings (leading zeros, 256, empty) and 8 endings (ports,
    /// garbage, a second colon, a zone, a space), 228,488 strings, and the edge cases.
    #[test]
    fn the_dotted_quad_fast_path_agrees_with_the_text_rules() {
        let octets = [
            "0", "1", "9", "10", "99", "100", "199", "255", "256", "01", "001", "999", "",
        ];
        let endings = ["", ":", ":80", ":8a", ":1:2", "%x", " ", ".7"];
        let mut fast_hits = 0;
        let mut cases = 0;
        for a in octets {
            for b in octets {
                for c in octets {
                    for d in octets {
                        for e in endings {
                            let raw = format!("{a}.{b}.{c}.{d}{e}");
                            cases += 1;
                            let want = parse_addr_text(raw.as_bytes());
                            match dotted_quad_with_port(raw.as_bytes()) {
                                Some(v4) => {
                                    fast_hits += 1;
                                    assert_eq!(want, Some(IpAddr::V4(v4)), "{raw}");
                                }
                                // Where the text rules give a plain dotted quad, so does
                                // the fast path (the common case never falls back).
                                None => assert!(
                                    want.is_none() || !["", ":", ":80"].contains(&e),
                                    "{raw}"
                                ),
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(cases, 228_488);
        assert!(fast_hits > 1_000, "{fast_hits}");
        for (raw, want) in [
            (&b"127.0.0.2:53211"[..], Some("127.0.0.2")),
            (b"0.0.0.0", Some("0.0.0.0")),
            (b"255.255.255.255:0", Some("255.255.255.255")),
            (b"1.2.3.4:", Some("1.2.3.4")),
            (b"256.1.1.1", None),
            (b"01.2.3.4", None),
            (b"1.2.3", None),
            (b"1.2.3.4.5", None),
            (b"1.2.3.4:80:1", None),
            (b"1.2.3.4:http", None),
            (b"1..3.4", None),
            (b"1234.1.1.1", None),
            (b" 1.2.3.4", None),
        ] {
            assert_eq!(
                dotted_quad_with_port(raw),
                want.map(|w| w.parse().unwrap_or(Ipv4Addr::UNSPECIFIED)),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn xff_takes_the_entry_n_hops_from_the_right() {
        let xff = b"203.0.113.9, 198.51.100.7,192.0.2.33";
        assert_eq!(from_xff(xff, 1), Some(ip("192.0.2.33")));
        assert_eq!(from_xff(xff, 2), Some(ip("198.51.100.7")));
        assert_eq!(from_xff(xff, 3), Some(ip("203.0.113.9")));
        assert_eq!(from_xff(xff, 4), None);
        assert_eq!(from_xff(xff, 0), None);
        assert_eq!(from_xff(b"garbage, 1.2.3.4", 2), None);
    }

    #[test]
    fn xff_falls_back_to_remote_address() {
        let remote = Some(&b"127.0.0.9:4000"[..]);
        let cfg = xff_cfg(2);
        assert_eq!(
            client_ip(&cfg, remote, Some(b"1.1.1.1")),
            Some(ip("127.0.0.9"))
        );
        assert_eq!(client_ip(&cfg, remote, None), Some(ip("127.0.0.9")));
        assert_eq!(
            client_ip(&cfg, remote, Some(b"1.1.1.1, 2.2.2.2")),
            Some(ip("1.1.1.1"))
        );
        // Default source ignores XFF entirely (a client could forge it).
        let cfg = ClientIpConfig::default();
        assert_eq!(
            client_ip(&cfg, remote, Some(b"1.1.1.1")),
            Some(ip("127.0.0.9"))
        );
        assert_eq!(client_ip(&cfg, None, None), None);
    }

    #[test]
    fn xff_with_100_entries_of_garbage_never_panics() {
        let mut xff = Vec::new();
        for i in 0..100 {
            xff.extend_from_slice(format!("{i}.x.\u{0}[]:%,").as_bytes());
        }
        xff.extend_from_slice(b"8.8.8.8");
        assert_eq!(from_xff(&xff, 1), Some(ip("8.8.8.8")));
        assert_eq!(from_xff(&xff, 7), None);
        assert_eq!(from_xff(&xff, u32::MAX), None);
    }

    #[test]
    fn prefixes_group_addresses() {
        let d = ClientIpConfig::default();
        assert_eq!(masked(ip("192.0.2.77"), &d), ip("192.0.2.77"));
        assert_eq!(masked(ip("2001:db8:1:2:aaaa::1"), &d), ip("2001:db8:1:2::"));
        assert_eq!(
            masked(ip("2001:db8:1:2:aaaa::1"), &d),
            masked(ip("2001:db8:1:2:ffff::9"), &d)
        );
        let c = ClientIpConfig {
            ipv4_prefix_len: 24,
            ipv6_prefix_len: 0,
            ..d
        };
        assert_eq!(masked(ip("192.0.2.77"), &c), ip("192.0.2.0"));
        assert_eq!(masked(ip("2001:db8::1"), &c), ip("::"));
        let c0 = ClientIpConfig {
            ipv4_prefix_len: 0,
            ipv6_prefix_len: 128,
            ..d
        };
        assert_eq!(masked(ip("192.0.2.77"), &c0), ip("0.0.0.0"));
        assert_eq!(masked(ip("2001:db8::1"), &c0), ip("2001:db8::1"));
    }

    #[test]
    fn groups_are_the_24_or_48_and_distinct_per_limit() {
        assert_eq!(group(ip("192.0.2.77")), ip("192.0.2.0"));
        assert_eq!(group(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1::"));
        // A key prefix wider than the group is its own group.
        assert_eq!(group(ip("10.1.0.0")), ip("10.1.0.0"));
        assert_eq!(group(ip("2001:db8::")), ip("2001:db8::"));
        let fp = |a: &str, limit: u64| group_fp(ip(a), limit);
        assert_eq!(fp("192.0.2.1", 7), fp("192.0.2.254", 7));
        assert_eq!(fp("2001:db8:1:2::1", 7), fp("2001:db8:1:ffff::9", 7));
        let distinct = [
            fp("192.0.2.1", 7),
            fp("192.0.3.1", 7),
            fp("192.0.2.1", 8),
            fp("2001:db8:1::1", 7),
            fp("2001:db8:2::1", 7),
            // Its /48's 48 bits are 192.0.2.0's 32: told apart by the family.
            fp("0:c000:200::1", 7),
        ];
        for (i, a) in distinct.iter().enumerate() {
            for b in distinct.get(i + 1..).unwrap_or_default() {
                assert_ne!(a, b);
            }
        }
    }

    /// Hostile review 2: the fast path against the text rules on random byte strings over
    /// an address-heavy alphabet (every byte value too), and past the text rules' 64-byte
    /// cap: a dotted quad with a long port is no address by the text rules.
    #[test]
    fn the_dotted_quad_fast_path_agrees_on_random_bytes_and_long_ports() {
        let long = format!("1.2.3.4:{}", "0".repeat(57));
        assert_eq!(long.len(), 65);
        assert_eq!(parse_addr_text(long.as_bytes()), None);
        assert_eq!(dotted_quad_with_port(long.as_bytes()), None);
        assert_eq!(parse_addr(long.as_bytes()), None);
        let at_cap = format!("1.2.3.4:{}", "0".repeat(56));
        assert_eq!(
            dotted_quad_with_port(at_cap.as_bytes()),
            Some(Ipv4Addr::new(1, 2, 3, 4))
        );

        const DIGITS: &[u8] = b"0123456789";
        const SEPARATORS: &[u8] = b"............:: \"[]%a";
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let pick = |set: &[u8], r: u64| {
            let i = usize::try_from(r % set.len() as u64).unwrap_or(0);
            set.get(i).copied().unwrap_or(b'0')
        };
        let (mut cases, mut fast_hits) = (0u32, 0u32);
        for _ in 0..300_000 {
            // Up to 6 runs of 0..=4 digits (mostly 1..=3), each followed by a separator (mostly a dot),
            // now and then one byte of any value; half of them without the last separator.
            let mut raw = Vec::new();
            for _ in 0..(next() % 7) {
                let run = match next() % 8 {
                    0 => 0,
                    1 => 4,
                    r => 1 + r % 3,
                };
                for _ in 0..run {
                    raw.push(pick(DIGITS, next()));
                }
                let r = next();
                raw.push(match r % 20 {
                    0 => (r >> 8) as u8,
                    _ => pick(SEPARATORS, r >> 8),
                });
            }
            if next() % 2 == 0 {
                raw.pop();
            }
            cases += 1;
            if let Some(v4) = dotted_quad_with_port(&raw) {
                fast_hits += 1;
                assert_eq!(
                    parse_addr_text(&raw),
                    Some(IpAddr::V4(v4)),
                    "{}",
                    String::from_utf8_lossy(&raw)
                );
            }
        }
        assert_eq!(cases, 300_000);
        // Fixed seed: the same strings every run, 334 of them addresses by the fast path.
        assert_eq!(fast_hits, 334);
    }
}
