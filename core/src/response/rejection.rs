//! The rejection crawlguard sends: a cheap, honest, cacheless 429/503.
//!
//! Crawlers read `Retry-After` (RFC 9110 section 10.2.3) as delay-seconds; an HTTP-date, a 0 or
//! an identical value for everyone (synchronised retry waves) all do harm, so the value is
//! ceil(time until a token), clamped to the class range, plus uniform random jitter.

use crate::config::RetryAfter;

/// Retry-After in whole seconds for a bucket that refills its next token in `wait_ns`:
/// `clamp(ceil(wait_ns / 1e9), min_s, max_s) + jitter`, where `jitter` is `random % (jitter_s
/// + 1)` (uniform 0..=jitter_s). Never 0.
pub fn retry_after_s(wait_ns: u64, policy: &RetryAfter, random: u32) -> u32 {
    let clamped = clamp_s(wait_ns.div_ceil(crate::limits::bucket::NS_PER_S), policy);
    clamped.saturating_add(jitter_s(policy, random))
}

/// The jitter added to a clamped Retry-After: `random % (jitter_s + 1)`, uniform
/// `0..=jitter_s` seconds.
pub fn jitter_s(policy: &RetryAfter, random: u32) -> u32 {
    random % policy.jitter_s.saturating_add(1).max(1)
}

/// `secs` clamped to the class range `[max(min_s, 1), max(max_s, min_s, 1)]`: never 0.
pub fn clamp_s(secs: u64, policy: &RetryAfter) -> u32 {
    let lo = policy.min_s.max(1);
    u32::try_from(secs)
        .unwrap_or(u32::MAX)
        .clamp(lo, policy.max_s.max(lo))
}

/// Body of a rejection, one short line (<= 64 bytes) naming the status it goes with:
/// `429 Too Many Requests: ...`, `503 Service Unavailable: ...`, and for other statuses a
/// normalised upstream may carry (502, 504, ...) their RFC 9110 reason phrase.
pub fn body(status: u16) -> &'static str {
    match status {
        429 => "429 Too Many Requests: try again after Retry-After\n",
        503 => "503 Service Unavailable: try again after Retry-After\n",
        502 => "502 Bad Gateway: try again after Retry-After\n",
        504 => "504 Gateway Timeout: try again after Retry-After\n",
        500 => "500 Internal Server Error: try again after Retry-After\n",
        408 => "408 Request Timeout: try again after Retry-After\n",
        s if (500..600).contains(&s) => "Server error: try again after Retry-After\n",
        _ => "Client error: try again after Retry-After\n",
    }
}

/// A locally generated rejection, ready for `send_http_response`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// 429 or 503.
    pub status: u16,
    /// Response headers, lowercase names, in order.
    pub headers: Vec<(&'static str, String)>,
    /// Body bytes.
    pub body: &'static str,
}

/// What a rejection's `RateLimit-Policy` states of the limit that refused it
/// (draft-ietf-httpapi-ratelimit-headers-08 section 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    /// A token bucket: `burst` requests (`q`) per window of `window_s` seconds (`w`, the
    /// time an empty bucket takes to refill).
    Window {
        /// `q`: the bucket's capacity.
        burst: u32,
        /// `w`: seconds to refill it.
        window_s: u64,
    },
    /// Requests in flight at once: `q` with the quota unit `concurrent-requests` (`qu`), no
    /// window.
    InFlight {
        /// `q`: the cap.
        max: u16,
    },
}

/// The quota a rejection by `limit` states: `in_flight` the cap of requests in flight that
/// refused it, else its token bucket's burst and window (`None`: neither, which a
/// rejection never is).
pub fn quota(limit: &crate::config::Limit, in_flight: Option<u16>) -> Option<Quota> {
    match (in_flight, limit.bucket) {
        (Some(max), _) => Some(Quota::InFlight { max }),
        (None, Some(b)) => Some(Quota::Window {
            burst: b.burst,
            window_s: b.window_s(),
        }),
        (None, None) => None,
    }
}

/// Builds the rejection: `retry-after`, `cache-control: no-store`, `content-type: text/plain;
/// charset=utf-8`, and, when `ratelimit` is given as `(limit name, quota)`, the
/// `ratelimit-policy` / `ratelimit` fields of draft-ietf-httpapi-ratelimit-headers (structured
/// field syntax: `"name";q=<burst>;w=<window_s>`, or for requests in flight
/// `"name";q=<max>;qu="concurrent-requests"`, and `"name";r=0;t=<retry_after_s>`).
/// No redirect, no robots directives, nothing a cache may store.
pub fn rejection(status: u16, retry_after_s: u32, ratelimit: Option<(&str, Quota)>) -> Rejection {
    let mut headers = vec![
        ("retry-after", retry_after_s.to_string()),
        ("cache-control", "no-store".to_string()),
        ("content-type", "text/plain; charset=utf-8".to_string()),
    ];
    if let Some((name, quota)) = ratelimit {
        let policy = match quota {
            Quota::Window { burst, window_s } => format!("\"{name}\";q={burst};w={window_s}"),
            Quota::InFlight { max } => format!("\"{name}\";q={max};qu=\"concurrent-requests\""),
        };
        headers.push(("ratelimit-policy", policy));
        headers.push(("ratelimit", format!("\"{name}\";r=0;t={retry_after_s}")));
    }
    Rejection {
        status,
        headers,
        body: body(status),
    }
}

/// Body of the 400 for a request whose rate-limit key header names more than
/// `limits::bucket_key::MAX_KEY_VALUES` distinct values.
pub const MALFORMED_KEY_BODY: &str =
    "400 Bad Request: too many values in a rate-limit key header\n";

/// The 400 for a request whose rate-limit key header names too many values: `cache-control:
/// no-store`, `content-type: text/plain; charset=utf-8`, a one-line body, and no
/// Retry-After (the same request will never pass, however long the client waits).
pub fn malformed_key() -> Rejection {
    Rejection {
        status: 400,
        headers: vec![
            ("cache-control", "no-store".to_string()),
            ("content-type", "text/plain; charset=utf-8".to_string()),
        ],
        body: MALFORMED_KEY_BODY,
    }
}

/// `%RESPONSE_CODE_DETAILS%` of a rejection crawlguard decided itself.
pub const DETAILS_LIMITED: &str = "crawlguard_rate_limited";
/// `%RESPONSE_CODE_DETAILS%` of a request shed because the origin is unhealthy.
pub const DETAILS_SHED: &str = "crawlguard_shed";
/// `%RESPONSE_CODE_DETAILS%` of a request rejected for a malformed rate-limit key.
pub const DETAILS_MALFORMED_KEY: &str = "crawlguard_malformed_key";
/// `%RESPONSE_CODE_DETAILS%` of an upstream rejection crawlguard normalised.
pub const DETAILS_NORMALISED: &str = "crawlguard_normalised_upstream";

/// Retry-After jitter's random numbers, per worker. Jitter only has to spread clients out,
/// so an xorshift64* (no host call per rejection) is enough.
#[derive(Debug)]
pub struct Jitter {
    state: std::cell::Cell<u64>,
}

impl Jitter {
    /// A generator seeded with `seed` (any value; 0 is fine).
    pub fn new(seed: u64) -> Jitter {
        // Never 0 (xorshift's fixed point).
        Jitter {
            state: std::cell::Cell::new(seed | 1),
        }
    }

    /// A uniform random u32.
    pub fn next_u32(&self) -> u32 {
        let mut x = self.state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: RetryAfter = RetryAfter {
        min_s: 5,
        max_s: 30,
        jitter_s: 10,
    };

    #[test]
    fn retry_after_is_ceil_of_wait_clamped_plus_jitter() {
        let nojit = RetryAfter { jitter_s: 0, ..P };
        assert_eq!(retry_after_s(7_000_000_001, &nojit, 12345), 8);
        assert_eq!(retry_after_s(7_000_000_000, &nojit, 0), 7);
        assert_eq!(retry_after_s(1, &nojit, 0), 5); // clamped up to min_s
        assert_eq!(retry_after_s(3_600_000_000_000, &nojit, 0), 30); // down to max_s
        assert_eq!(retry_after_s(u64::MAX, &nojit, u32::MAX), 30);
        assert_eq!(retry_after_s(7_000_000_000, &P, 0), 7);
        assert_eq!(retry_after_s(7_000_000_000, &P, 10), 17);
        assert_eq!(retry_after_s(7_000_000_000, &P, 11), 7); // 11 % 11
        assert_eq!(retry_after_s(7_000_000_000, &P, 25), 10);
    }

    #[test]
    fn retry_after_is_never_zero() {
        let p = RetryAfter {
            min_s: 0,
            max_s: 0,
            jitter_s: 0,
        };
        assert_eq!(retry_after_s(0, &p, 0), 1);
    }

    #[test]
    fn jitter_spreads_uniformly_over_0_to_jitter_s() {
        let mut seen = [0u32; 11];
        for r in 0..11_000u32 {
            let v = retry_after_s(7_000_000_000, &P, r);
            assert!((7..=17).contains(&v));
            if let Some(c) = seen.get_mut((v - 7) as usize) {
                *c += 1;
            }
        }
        assert_eq!(seen, [1000; 11]);
    }

    #[test]
    fn rejection_on_the_wire() {
        let r = rejection(429, 12, None);
        assert_eq!(r.status, 429);
        assert_eq!(
            r.headers,
            vec![
                ("retry-after", "12".to_string()),
                ("cache-control", "no-store".to_string()),
                ("content-type", "text/plain; charset=utf-8".to_string()),
            ]
        );
        assert_eq!(
            r.body,
            "429 Too Many Requests: try again after Retry-After\n"
        );
        assert!(r.body.len() <= 64);
        for status in [408, 429, 500, 502, 503, 504, 507, 418] {
            let b = body(status);
            assert!(b.len() <= 64, "{status}");
            assert_eq!(b.matches('\n').count(), 1);
        }
        assert!(body(503).starts_with("503 Service Unavailable"));
        assert!(body(502).starts_with("502 Bad Gateway"));
        assert!(body(504).starts_with("504 Gateway Timeout"));
        assert!(body(507).starts_with("Server error"));
    }

    #[test]
    fn malformed_key_rejection_is_a_cacheless_400_without_retry_after() {
        let r = malformed_key();
        assert_eq!(r.status, 400);
        assert_eq!(
            r.headers,
            vec![
                ("cache-control", "no-store".to_string()),
                ("content-type", "text/plain; charset=utf-8".to_string()),
            ]
        );
        assert_eq!(
            r.body,
            "400 Bad Request: too many values in a rate-limit key header\n"
        );
        assert!(r.body.len() <= 64);
    }

    #[test]
    fn ratelimit_headers_use_structured_field_syntax() {
        let window = Quota::Window {
            burst: 100,
            window_s: 5,
        };
        let r = rejection(503, 4, Some(("human_per_ip", window)));
        assert_eq!(r.body, body(503));
        assert_eq!(
            r.headers.get(3..),
            Some(
                &[
                    ("ratelimit-policy", "\"human_per_ip\";q=100;w=5".to_string()),
                    ("ratelimit", "\"human_per_ip\";r=0;t=4".to_string()),
                ][..]
            )
        );
        // Requests in flight: the draft's `concurrent-requests` quota unit, no window.
        let r = rejection(429, 2, Some(("script_per_ip", Quota::InFlight { max: 8 })));
        assert_eq!(
            r.headers.get(3..),
            Some(
                &[
                    (
                        "ratelimit-policy",
                        "\"script_per_ip\";q=8;qu=\"concurrent-requests\"".to_string()
                    ),
                    ("ratelimit", "\"script_per_ip\";r=0;t=2".to_string()),
                ][..]
            )
        );
    }
}
