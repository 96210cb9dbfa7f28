//! What a request's headers say, read once: its route, client address and prefix, and
//! whether its path is exempt ([`Facts`]).

use crate::config::{Config, IpSource, KeyKind};
use crate::host::Host;
use crate::identity::class::Class;
use crate::identity::client_ip;
use std::net::IpAddr;

/// The request facts verification and limiting need, derived once from the request
/// headers (and kept while the request waits for a verdict).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// Route index (see [`Config::route_name`]).
    pub route: usize,
    /// The full client address (per `client_ip`): what a crawler claim is about; `None` if
    /// nothing parses.
    pub client_ip: Option<IpAddr>,
    /// The client address masked to its prefix: the `client_ip` bucket key and the prefix
    /// whose spoofed verdicts are counted.
    pub client_prefix: Option<IpAddr>,
    /// The path is in `exempt_paths`, with no query string (nor fragment): a request for
    /// `/robots.txt?x` is an ordinary request, so a query cannot make new exempt URLs.
    pub exempt: bool,
    /// `:path` without its query string ([`path_only`]): the `path` key.
    pub path: Vec<u8>,
    /// The catalog bot id the User-Agent names (the `bot` key), kept only while the request
    /// waits for a verdict (a request decided at once borrows it from the classification).
    pub bot: Option<String>,
    /// The class a verifiable crawler claim asks for (a catalog bot with `verify: true`),
    /// once classified: with `on_error: unverified_bot` (the default) a request that gets
    /// it was verified, and never escalates.
    pub claimed: Option<Class>,
}

/// `:path` without its query string (and fragment).
pub fn path_only(path: &[u8]) -> &[u8] {
    let end = path
        .iter()
        .position(|b| *b == b'?' || *b == b'#')
        .unwrap_or(path.len());
    path.get(..end).unwrap_or(path)
}

impl Facts {
    /// Reads the facts of the current request (host calls: `:path`, `x-forwarded-for` when
    /// configured, and the downstream address unless that gave the client; only `:path` for
    /// an exempt path when `exempt_limit` is off).
    pub fn read(cfg: &Config, host: &mut dyn Host) -> Facts {
        let mut path = host.request_header(":path").unwrap_or_default();
        let len = path_only(&path).len();
        let whole = len == path.len();
        path.truncate(len);
        let route = cfg.route_of(&path);
        // Only reads fetch robots.txt and sitemaps; a POST or PURGE of one is an ordinary
        // request (classed, limited, shed), so exemption cannot carry writes past the limits.
        let exempt = whole
            && cfg.exempt_paths.iter().any(|e| e.as_bytes() == path)
            && host
                .request_header(":method")
                .is_none_or(|m| m == b"GET" || m == b"HEAD");
        if exempt && cfg.exempt_limit.is_none() {
            return Facts {
                route,
                client_ip: None,
                client_prefix: None,
                exempt,
                path,
                bot: None,
                claimed: None,
            };
        }
        let xff = match cfg.client_ip.source {
            IpSource::Xff => host.request_header("x-forwarded-for"),
            IpSource::RemoteAddress => None,
        };
        // `client_ip::client_ip`'s rule, with the downstream address (a host call that
        // returns a buffer) read only when the forwarded address does not decide.
        let client_ip = client_ip::configured_xff(&cfg.client_ip, xff.as_deref()).or_else(|| {
            host.downstream_address()
                .and_then(|r| client_ip::parse_addr(&r))
        });
        Facts {
            route,
            client_ip,
            client_prefix: client_ip.map(|ip| client_ip::masked(ip, &cfg.client_ip)),
            exempt,
            path,
            bot: None,
            claimed: None,
        }
    }
}

/// Every line of each header a header-keyed limit needs, read up front (nothing when no
/// limit is keyed by a header).
pub(super) fn read_key_headers<'a>(
    cfg: &'a Config,
    host: &mut dyn Host,
) -> Vec<(&'a str, Vec<Vec<u8>>)> {
    cfg.limits
        .iter()
        .flat_map(|l| l.key.parts().iter().filter_map(KeyKind::header_name))
        .map(|name| (name, host.request_header_lines(name)))
        .collect()
}
