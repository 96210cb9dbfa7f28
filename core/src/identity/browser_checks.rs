//! Browser claims checked like crawler claims: a request classed `human` whose User-Agent
//! names a current browser must carry what that browser always sends (the catalog's
//! `browser_checks`, from `contract/catalog/bots.json`, generated into
//! [`crate::identity::catalog::BuiltinBrowserCheck`]s). One that fails an enforced check is
//! `suspect_browser`; every failure is counted per check
//! (`crawlguard.browser_check.<id>.inconsistent`), in shadow mode too, where the request
//! stays `human`.
//!
//! Cost: a browser User-Agent is scanned once per check for its browser tokens; a check that
//! applies reads its header (one host call), and when the header is missing, the TLS
//! attribute (once per request).

use crate::config::{BrowserCheckMode, Config};
use crate::host::Host;
use crate::identity::catalog::builtin_browser_checks;
use crate::identity::class::Class;

/// What the checks made of a `human` request: its class (`human`, or `suspect_browser` when
/// an enforced check failed) and the checks it failed (indexes into
/// [`builtin_browser_checks`], enforced or in shadow mode), for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BrowserJudgement {
    /// A check in `enforce` mode failed.
    pub suspect: bool,
    /// Bit `i`: check `i` failed.
    pub failed: u32,
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

/// Runs every check switched on (`browser_checks.<id>`) on a `human` request with
/// User-Agent `ua`.
pub fn judge(cfg: &Config, host: &mut dyn Host, ua: &[u8]) -> BrowserJudgement {
    let mut out = BrowserJudgement::default();
    let mut tls: Option<bool> = None;
    for (i, check) in builtin_browser_checks().iter().enumerate() {
        let mode = cfg.browser_checks.mode(i);
        if mode == BrowserCheckMode::Off
            || (check.secure_only && tls == Some(false))
            || !check.applies_to(ua)
        {
            continue;
        }
        // The header first: a real browser over TLS has it, and then the TLS attribute is
        // never read (one host call per check).
        if host.request_header(check.header).is_some() {
            continue;
        }
        if check.secure_only && !*tls.get_or_insert_with(|| host.downstream_tls()) {
            continue;
        }
        out.failed |= 1u32
            .checked_shl(u32::try_from(i).unwrap_or(u32::MAX))
            .unwrap_or(0);
        out.suspect |= mode == BrowserCheckMode::Enforce;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::catalog::{major_version, BuiltinBrowserCheck};

    const CHROME: &[u8] = b"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
    const FIREFOX: &[u8] =
        b"Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";
    const WEBVIEW: &[u8] = b"Mozilla/5.0 (Linux; Android 13; Pixel 7 Build/TQ3A; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/120.0.6099.230 Mobile Safari/537.36";
    const OLD_CHROME: &[u8] = b"Mozilla/5.0 (Windows NT 6.1) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/70.0.3538.102 Safari/537.36";
    const SAFARI: &[u8] = b"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15";

    fn check(id: &str) -> &'static BuiltinBrowserCheck {
        builtin_browser_checks()
            .iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("no check {id}"))
    }

    #[test]
    fn checks_apply_to_current_browsers_of_their_families_only() {
        let fetch = check("fetch_metadata");
        let hints = check("client_hints");
        assert!(fetch.applies_to(CHROME) && hints.applies_to(CHROME));
        assert!(fetch.applies_to(FIREFOX) && !hints.applies_to(FIREFOX));
        // Excused, too old, or not named.
        for ua in [
            WEBVIEW,
            OLD_CHROME,
            SAFARI,
            b"curl/8.5.0".as_slice(),
            b"Chrome/",
        ] {
            assert!(!fetch.applies_to(ua), "{}", String::from_utf8_lossy(ua));
            assert!(!hints.applies_to(ua), "{}", String::from_utf8_lossy(ua));
        }
        // Case does not matter; a huge version does not overflow.
        assert!(fetch.applies_to(b"x CHROME/999999999999 y"));
    }

    #[test]
    fn major_versions_are_the_leading_digits() {
        assert_eq!(major_version(b"120.0.0.0 Safari"), Some(120));
        assert_eq!(major_version(b"9"), Some(9));
        assert_eq!(major_version(b".1"), None);
        assert_eq!(major_version(b"99999999999"), Some(999_999));
    }
}
