//! Client address parsing on arbitrary bytes: `parse_addr` (Envoy's `source.address` or one
//! XFF entry), `from_xff` for every hop count, `client_ip` and `masked`. Never panics; what
//! parses is canonical and re-parses from its own text; `from_xff` picks exactly the entry
//! `hops` from the right; masking is idempotent and keeps no bit beyond the prefix.
#![no_main]

use crawlguard_core::identity::client_ip::{client_ip, from_xff, masked, parse_addr};
use crawlguard_core::config::{ClientIpConfig, IpSource};
use libfuzzer_sys::fuzz_target;
use std::net::IpAddr;

fuzz_target!(|data: &[u8]| {
    let one = parse_addr(data);
    if let Some(ip) = one {
        assert_eq!(ip, ip.to_canonical());
        assert_eq!(parse_addr(ip.to_string().as_bytes()), Some(ip));
    }
    let entries: Vec<&[u8]> = data.split(|b| *b == b',').collect();
    for hops in (0u32..=20).chain([u32::MAX]) {
        let want = usize::try_from(hops)
            .ok()
            .filter(|h| (1..=entries.len()).contains(h))
            .and_then(|h| entries.get(entries.len() - h))
            .and_then(|e| parse_addr(e));
        assert_eq!(from_xff(data, hops), want, "hops {hops}");
    }
    let len = data.len();
    let cfg = ClientIpConfig {
        source: IpSource::Xff,
        xff_trusted_hops: (len % 16) as u32 + 1,
        ipv4_prefix_len: (len % 40) as u8,
        ipv6_prefix_len: (len % 140) as u8,
    };
    let got = client_ip(&cfg, Some(data), Some(data));
    assert_eq!(got, from_xff(data, cfg.xff_trusted_hops).or(one));
    if let Some(ip) = got {
        let m = masked(ip, &cfg);
        assert_eq!(masked(m, &cfg), m);
        match m {
            IpAddr::V4(a) => {
                let l = u32::from(cfg.ipv4_prefix_len.min(32));
                assert_eq!(u32::from(a).checked_shl(l).unwrap_or(0), 0);
            }
            IpAddr::V6(a) => {
                let l = u32::from(cfg.ipv6_prefix_len.min(128));
                assert_eq!(u128::from(a).checked_shl(l).unwrap_or(0), 0);
            }
        }
    }
});
