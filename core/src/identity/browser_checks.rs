//! Browser claims checked like crawler claims: a request classed `human` whose User-Agent
//! names a current browser must show what that browser always shows (the catalog's
//! `browser_checks`, from `contract/catalog/bots.json`, generated into
//! [`crate::identity::catalog::BuiltinBrowserCheck`]s): a header it always sends, a
//! browser's TLS stack and ALPN, HTTP/2 where the listener offers it, and an access network
//! rather than a datacenter ([`Signal`]). One that fails an enforced check is
//! `suspect_browser`; every failure is counted per check
//! (`crawlguard.browser_check.<id>.inconsistent`), in shadow mode too, where the request
//! stays `human`.
//!
//! Cost: the User-Agent's browser versions are read once ([`browser_versions`]); each check
//! switched on reads its signal with one host call (a header, or `request.protocol`), and
//! the TLS attribute only when a check that needs TLS would otherwise fail; the excuses are
//! searched for only when a signal failed. A check that is `off` reads nothing.

use crate::config::{parse_asn, BrowserCheckMode, Config};
use crate::host::Host;
use crate::identity::catalog::{browser_versions, builtin_browser_checks, Signal};
use crate::identity::class::Class;

/// What the checks made of a `human` request: its class (`human`, or `suspect_browser` when
/// an enforced check failed), the checks it failed (indexes into
/// [`builtin_browser_checks`], enforced or in shadow mode), for the counters, and the
/// network it comes from when a check read it (for the `asn` limit key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BrowserJudgement {
    /// A check in `enforce` mode failed.
    pub suspect: bool,
    /// Bit `i`: check `i` failed.
    pub failed: u32,
    /// The client's autonomous system, when the `network` check read it: `Some(None)` read
    /// and unknown, `None` not read.
    pub asn: Option<Option<u32>>,
}

impl BrowserJudgement {
    /// The class the request gets.
    pub fn class(self) -> Class {
        if self.suspect {
            Class::SuspectBrowser
        } else {
            Class::Human
        }
    }
}

/// The request's signals, each read from the host at most once, on first use.
struct Signals<'h> {
    host: &'h mut dyn Host,
    tls: Option<bool>,
    asn: Option<Option<u32>>,
}

impl Signals<'_> {
    /// The connection came over TLS.
    fn tls(&mut self) -> bool {
        *self.tls.get_or_insert_with(|| self.host.downstream_tls())
    }

    /// The client's autonomous system from `header`.
    fn asn(&mut self, header: &str) -> Option<u32> {
        *self
            .asn
            .get_or_insert_with(|| self.host.request_header(header).and_then(|v| parse_asn(&v)))
    }
}

/// Runs every check switched on (`browser_checks.<id>`) on a `human` request with
/// User-Agent `ua`.
pub fn judge(cfg: &Config, host: &mut dyn Host, ua: &[u8]) -> BrowserJudgement {
    let mut out = BrowserJudgement::default();
    let checks = builtin_browser_checks();
    if (0..checks.len()).all(|i| cfg.browser_checks.mode(i) == BrowserCheckMode::Off) {
        return out;
    }
    let versions = browser_versions(ua);
    let mut s = Signals {
        host,
        tls: None,
        asn: None,
    };
    for (i, check) in checks.iter().enumerate() {
        let mode = cfg.browser_checks.mode(i);
        if mode == BrowserCheckMode::Off
            || (check.secure_only && s.tls == Some(false))
            || !check.names_browser(&versions)
        {
            continue;
        }
        // The excuses last: a consistent browser, nearly every request, is never searched
        // for them (the result is the same in either order).
        if consistent(cfg, check.signal, check.header, check.secure_only, &mut s)
            || check.excuses(ua)
        {
            continue;
        }
        out.failed |= 1u32
            .checked_shl(u32::try_from(i).unwrap_or(u32::MAX))
            .unwrap_or(0);
        out.suspect |= mode == BrowserCheckMode::Enforce;
    }
    out.asn = s.asn;
    out
}

/// Whether the request shows what the browser would for `signal`. A signal whose input is
/// not configured, or missing, passes: only evidence of another client fails a check.
fn consistent(
    cfg: &Config,
    signal: Signal,
    header: &str,
    secure_only: bool,
    s: &mut Signals<'_>,
) -> bool {
    let cs = &cfg.client_signals;
    match signal {
        // The header first: a real browser over TLS has it, and then the TLS attribute is
        // never read.
        Signal::Header => s.host.request_header(header).is_some() || (secure_only && !s.tls()),
        // A fingerprint exists only for a TLS connection, so no TLS read is needed.
        Signal::TlsFingerprint => match &cs.ja4_header {
            None => true,
            Some(h) => match s.host.request_header(h) {
                None => true,
                Some(ja4) => !cs.is_library_handshake(&ja4),
            },
        },
        // A WebSocket handshake is HTTP/1.1 by design (RFC 6455 §4.1): browsers open it on
        // a connection of its own that offers only http/1.1, since Envoy does not offer
        // WebSockets over HTTP/2 (RFC 8441) by default. Only Envoy's `upgrade_configs` let
        // such a request through, as an upgrade: a page fetched with the header is
        // refused (403) or never becomes a page.
        Signal::HttpVersion => {
            !cs.listener_offers_h2
                || s.host
                    .request_protocol()
                    .is_none_or(|p| !p.starts_with(b"HTTP/1"))
                || !s.tls()
                || s.host
                    .request_header("upgrade")
                    .is_some_and(|u| u.eq_ignore_ascii_case(b"websocket"))
        }
        Signal::Network => match &cs.asn_header {
            None => true,
            Some(h) => s.asn(h).is_none_or(|asn| !cs.is_datacenter(asn)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::catalog::{browser_tokens, major_version, BuiltinBrowserCheck};

    const CHROME: &[u8] = b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
    const FIREFOX: &[u8] =
        b"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";
    const WEBVIEW: &[u8] = b"Mozilla/5.0 (Linux; Android 13; Pixel 7 Build/TQ3A; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/120.0.6099.230 Mobile Safari/537.36";
    const OLD_CHROME: &[u8] = b"Mozilla/5.0 (Windows NT 6.1) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/69.0.3497.100 Safari/537.36";
    const SAFARI: &[u8] = b"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15";

    fn check(id: &str) -> &'static BuiltinBrowserCheck {
        builtin_browser_checks()
            .iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("no check {id}"))
    }

    fn applies(id: &str, ua: &[u8]) -> bool {
        check(id).applies_to(ua, &browser_versions(ua))
    }

    #[test]
    fn checks_apply_to_current_browsers_of_their_families_only() {
        assert_eq!(browser_tokens(), ["chrome/", "firefox/"]);
        for id in [
            "fetch_metadata",
            "client_hints",
            "tls_fingerprint",
            "http_version",
        ] {
            assert!(applies(id, CHROME), "{id}");
        }
        for id in ["fetch_metadata", "tls_fingerprint", "http_version"] {
            assert!(applies(id, FIREFOX), "{id}");
        }
        assert!(!applies("client_hints", FIREFOX));
        // Excused, too old, or not named.
        for ua in [
            WEBVIEW,
            OLD_CHROME,
            SAFARI,
            b"curl/8.5.0".as_slice(),
            b"Chrome/",
        ] {
            for id in ["fetch_metadata", "client_hints", "http_version"] {
                assert!(!applies(id, ua), "{id} {}", String::from_utf8_lossy(ua));
            }
        }
        // A WebView runs Chromium's TLS stack: its handshake is checked, its headers not.
        assert!(applies("tls_fingerprint", WEBVIEW));
        // The network check names no browser: every human User-Agent.
        for ua in [CHROME, SAFARI, WEBVIEW, b"Lynx/2.8.9".as_slice()] {
            assert!(applies("network", ua));
        }
        // Case does not matter; a huge version does not overflow.
        assert!(applies("fetch_metadata", b"x CHROME/999999999999 y"));
    }

    #[test]
    fn major_versions_are_the_leading_digits() {
        assert_eq!(major_version(b"120.0.0.0 Safari"), Some(120));
        assert_eq!(major_version(b"9"), Some(9));
        assert_eq!(major_version(b".1"), None);
        assert_eq!(major_version(b"99999999999"), Some(999_999));
        let v = browser_versions(FIREFOX);
        assert_eq!((v[0], v[1]), (None, Some(128)));
    }

    #[test]
    fn browser_versions_are_read_after_each_tokens_first_occurrence() {
        // The reference: a substring search per token, the version after its first match.
        fn naive(ua: &[u8]) -> Vec<Option<u32>> {
            browser_tokens()
                .iter()
                .map(|t| {
                    let t = t.as_bytes();
                    ua.windows(t.len())
                        .position(|w| w.eq_ignore_ascii_case(t))
                        .and_then(|p| major_version(ua.get(p + t.len()..).unwrap_or_default()))
                })
                .collect()
        }
        let uas: [&[u8]; 12] = [
            CHROME,
            FIREFOX,
            WEBVIEW,
            SAFARI,
            b"",
            b"/",
            b"chrome/",
            b"Chrome/ 5 Chrome/7",
            b"xCHROME/12 firefox/3//",
            b"Firefox/5 Chrome/9 Firefox/6",
            b"hrome/1 rome/2 /3",
            b"Mozilla/5.0 chrome/99999999999 FIREFOX/",
        ];
        for ua in uas {
            let got = browser_versions(ua);
            assert_eq!(
                got.get(..browser_tokens().len()).unwrap_or_default(),
                naive(ua).as_slice(),
                "{}",
                String::from_utf8_lossy(ua)
            );
        }
        assert_eq!(browser_versions(b"Chrome/ 5 Chrome/7")[0], None);
        assert_eq!(
            browser_versions(b"Firefox/5 Chrome/9 Firefox/6")[1],
            Some(5)
        );
    }
}
