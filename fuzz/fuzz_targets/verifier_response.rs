//! Verifier answers (`verify::parse_response`). Input: line 1 is the `:status` (absent if the
//! line is `-`), line 2 is the claim asked about as `<ip> <bot>` (default `66.249.66.1
//! googlebot`), the rest is the body. Never panics; an accepted answer carries exactly the
//! verdict and ttl_s that the body's JSON says, for the ip and bot asked.
#![no_main]

use crawlguard_core::identity::verifier_answer::{parse_response, VerifyError};
use libfuzzer_sys::fuzz_target;
use std::net::IpAddr;

fuzz_target!(|data: &[u8]| {
    let mut lines = data.splitn(3, |b| *b == b'\n');
    let status = lines.next().unwrap_or_default();
    let claim = lines.next().unwrap_or_default();
    let body = lines.next().unwrap_or_default();
    let status = (status != b"-").then_some(status);
    let claim = std::str::from_utf8(claim).unwrap_or_default();
    let (ip, bot) = match claim.split_once(' ') {
        Some((ip, bot)) => match ip.parse::<IpAddr>() {
            Ok(ip) => (ip.to_canonical(), bot),
            Err(_) => (IpAddr::from([66, 249, 66, 1]), "googlebot"),
        },
        None => (IpAddr::from([66, 249, 66, 1]), "googlebot"),
    };
    match parse_response(status, body, ip, bot) {
        Ok(a) => {
            assert_eq!(status, Some(&b"200"[..]));
            // serde_json skips an ignored field's string without checking its UTF-8, so the
            // body is read here the same way: bad bytes become U+FFFD, fields are unchanged.
            let text = String::from_utf8_lossy(body);
            let v: serde_json::Value = match serde_json::from_str(&text) {
                Ok(v) => v,
                // serde skips an ignored member's number without converting it, so a body
                // with an unknown member like `"x":1e999` is accepted; `Value` must convert
                // it and cannot. Only that error is excused.
                Err(e) if e.to_string().starts_with("number out of range") => return,
                Err(e) => panic!("accepted body is not JSON: {e}"),
            };
            // serde also accepts the fields as an array in declaration order.
            let field = |name: &str, i: usize| match &v {
                serde_json::Value::Array(a) => a.get(i).cloned().unwrap_or_default(),
                v => v[name].clone(),
            };
            assert_eq!(field("verdict", 2).as_str(), Some(a.verdict.as_str()));
            assert_eq!(field("ttl_s", 3).as_u64(), Some(a.ttl_s));
            assert_eq!(field("bot", 1).as_str(), Some(bot));
            let said: IpAddr = field("ip", 0)
                .as_str()
                .and_then(|s| s.parse().ok())
                .expect("ip");
            assert_eq!(said.to_canonical(), ip);
        }
        Err(VerifyError::NoResponse) => assert!(status.is_none()),
        Err(VerifyError::Status(s)) => {
            assert!(status.is_some_and(|s| s != b"200"));
            assert!(s.chars().count() <= 16);
        }
        Err(VerifyError::Body(_)) => assert_eq!(status, Some(&b"200"[..])),
        Err(VerifyError::Dispatch | VerifyError::Overloaded) => {
            panic!("parse_response never says Dispatch or Overloaded")
        }
    }
});
