//! Checks the suites share: a [`Table`] of cases that reports every failing row, the shape
//! of a clean rejection ([`assert_clean_rejection`]), a clean Envoy log
//! ([`assert_log_clean`]).

use std::fmt::{Debug, Display};

use crate::client::Reply;

/// crawlguard's 429 body.
pub const BODY_429: &str = "429 Too Many Requests: try again after Retry-After\n";
/// crawlguard's 503 body.
pub const BODY_503: &str = "503 Service Unavailable: try again after Retry-After\n";
/// Every header a crawlguard rejection carries (its own or a normalised upstream one):
/// crawlguard's three, and what Envoy adds to any local reply. Nothing from upstream.
pub const LOCAL_REPLY_HEADERS: [&str; 6] = [
    "cache-control",
    "content-length",
    "content-type",
    "date",
    "retry-after",
    "server",
];

/// The promises every crawlguard rejection keeps (429 or 503, its own or an upstream one
/// normalised): the status, exactly one delay-seconds Retry-After, `no-store`, the one-line
/// text body with a correct length, no header from upstream. Returns the Retry-After.
pub fn assert_clean_rejection(r: &Reply, status: u16) -> u64 {
    assert_eq!(r.status, status, "{r:?}");
    assert_eq!(r.header_count("retry-after"), 1, "{r:?}");
    let ra = r.header("retry-after").expect("retry-after");
    assert!(
        !ra.is_empty() && ra.bytes().all(|b| b.is_ascii_digit()),
        "retry-after must be delay-seconds: {ra:?}"
    );
    assert_eq!(r.header_count("cache-control"), 1, "{r:?}");
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    let want = match status {
        503 => BODY_503,
        429 => BODY_429,
        other => panic!("no expected body for {other}"),
    };
    assert_eq!(r.body, want);
    assert_eq!(
        r.header("content-length"),
        Some(want.len().to_string().as_str())
    );
    assert_eq!(r.header_names(), LOCAL_REPLY_HEADERS, "{r:?}");
    ra.parse().expect("retry-after fits u64")
}

/// What in an Envoy log means the filter or its VM is in trouble.
const LOG_TROUBLE: [&str; 5] = [
    "panicked at",
    "][critical][",
    "Wasm VM failed",
    "RuntimeError",
    "Function: proxy_",
];

/// Panics if `envoy_log` shows a filter panic, a critical line (what the proxy-wasm SDK's
/// panic hook writes before the VM is lost), or a failed wasm VM.
pub fn assert_log_clean(envoy_log: &str) {
    let bad: Vec<&str> = envoy_log
        .lines()
        .filter(|l| {
            LOG_TROUBLE.iter().any(|t| l.contains(t))
                || (l.contains("[critical]") && l.contains("wasm"))
                || (l.contains("wasm log crawlguard") && l.contains("critical"))
        })
        .take(10)
        .collect();
    assert!(
        bad.is_empty(),
        "Envoy's log shows a filter panic, a critical line or a failed VM:\n{}",
        bad.join("\n")
    );
}

/// The rows of a table of cases, checked one after the other: a failing check is recorded
/// and the next row still runs; [`Table::finish`] (or dropping the table) panics once,
/// listing every failure.
///
/// ```no_run
/// # use crawlguard_integration::Table;
/// let mut t = Table::new("exempt paths");
/// for (path, status) in [("/robots.txt", 200), ("/sitemap.xml", 200)] {
///     t.eq(path, "status", status, 200);
/// }
/// t.finish();
/// ```
pub struct Table {
    name: String,
    checks: usize,
    failures: Vec<String>,
}

impl Table {
    /// An empty table, named in the report.
    pub fn new(name: &str) -> Table {
        Table {
            name: name.to_string(),
            checks: 0,
            failures: Vec::new(),
        }
    }

    /// Records a failure of `row` unless `got == want`; returns whether it held.
    pub fn eq<G, W>(&mut self, row: impl Display, what: &str, got: G, want: W) -> bool
    where
        G: PartialEq<W> + Debug,
        W: Debug,
    {
        let ok = got == want;
        self.check(
            row,
            ok,
            format_args!("{what}: got {got:?}, expected {want:?}"),
        )
    }

    /// Records `failure` for `row` unless `ok`; returns `ok`.
    pub fn check(&mut self, row: impl Display, ok: bool, failure: impl Display) -> bool {
        self.checks += 1;
        if !ok {
            self.failures.push(format!("{row}: {failure}"));
        }
        ok
    }

    /// Panics, listing every failure, if any check failed.
    pub fn finish(self) {
        // Drop reports.
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        if !self.failures.is_empty() && !std::thread::panicking() {
            panic!(
                "{}: {} of {} checks failed:\n  {}",
                self.name,
                self.failures.len(),
                self.checks,
                std::mem::take(&mut self.failures).join("\n  ")
            );
        }
    }
}
