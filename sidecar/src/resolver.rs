//! DNS access behind a small trait, so the verdict logic can be tested with a fake resolver
//! and run in production with hickory-resolver.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{
    ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::{DnsError as HickoryDnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::{Name, RData};
use hickory_resolver::TokioResolver;

/// Class of a failed DNS query; the label of `dns_errors_total{kind}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DnsErrorKind {
    /// No answer in time.
    Timeout,
    /// The server answered SERVFAIL.
    Servfail,
    /// The server answered REFUSED.
    Refused,
    /// The name does not exist (a definite answer).
    Nxdomain,
    /// The name exists but has no record of the asked type (a definite answer).
    NoData,
    /// The server could not be reached (connection refused or reset, no route, ...).
    Connection,
    /// The name cannot be queried (not a valid DNS name): it can never confirm anything.
    InvalidName,
    /// Anything else (malformed answer, other response codes).
    Other,
}

impl DnsErrorKind {
    /// Label value for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            DnsErrorKind::Timeout => "timeout",
            DnsErrorKind::Servfail => "servfail",
            DnsErrorKind::Refused => "refused",
            DnsErrorKind::Nxdomain => "nxdomain",
            DnsErrorKind::NoData => "nodata",
            DnsErrorKind::Connection => "connection",
            DnsErrorKind::InvalidName => "invalid_name",
            DnsErrorKind::Other => "other",
        }
    }

    /// True when the failure is itself an answer ("there is no such record"), as opposed to
    /// "could not find out now". Only definite failures may lead to `spoofed`.
    pub fn is_definite(self) -> bool {
        matches!(
            self,
            DnsErrorKind::Nxdomain | DnsErrorKind::NoData | DnsErrorKind::InvalidName
        )
    }
}

/// A failed DNS query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsFailure {
    /// The class of failure.
    pub kind: DnsErrorKind,
    /// Human-readable detail for logs.
    pub detail: String,
}

impl DnsFailure {
    /// A failure of `kind` with `detail`.
    pub fn new(kind: DnsErrorKind, detail: impl Into<String>) -> Self {
        DnsFailure {
            kind,
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for DnsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.detail)
    }
}

/// The two DNS questions FCrDNS asks.
pub trait Resolve: Send + Sync + 'static {
    /// PTR names of `ip` (from `in-addr.arpa` / `ip6.arpa`), as returned (any case, maybe
    /// with a trailing dot).
    fn reverse(&self, ip: IpAddr) -> impl Future<Output = Result<Vec<String>, DnsFailure>> + Send;

    /// Addresses of `name` of the same family as `family_of` (A for IPv4, AAAA for IPv6).
    fn forward(
        &self,
        name: &str,
        family_of: IpAddr,
    ) -> impl Future<Output = Result<Vec<IpAddr>, DnsFailure>> + Send;
}

/// Operational DNS settings for [`HickoryResolver`].
#[derive(Debug, Clone)]
pub struct DnsSettings {
    /// Nameservers; empty means the system configuration (`/etc/resolv.conf`).
    pub nameservers: Vec<SocketAddr>,
    /// Timeout of one attempt.
    pub timeout: Duration,
    /// Attempts per query.
    pub attempts: usize,
}

/// [`Resolve`] over hickory-resolver (UDP, TCP on truncation).
pub struct HickoryResolver {
    inner: TokioResolver,
    /// Hard cap per query: hickory's own timeout applies per attempt and server; this
    /// bounds the whole call whatever the server list looks like.
    budget: Duration,
}

impl HickoryResolver {
    /// Builds a resolver from `settings`.
    pub fn new(settings: &DnsSettings) -> Result<Self, NetError> {
        let mut builder = if settings.nameservers.is_empty() {
            TokioResolver::builder_tokio()?
        } else {
            let servers = settings
                .nameservers
                .iter()
                .map(|addr| {
                    let mut udp = ConnectionConfig::udp();
                    udp.port = addr.port();
                    let mut tcp = ConnectionConfig::tcp();
                    tcp.port = addr.port();
                    NameServerConfig::new(addr.ip(), true, vec![udp, tcp])
                })
                .collect();
            TokioResolver::builder_with_config(
                ResolverConfig::from_name_servers(servers),
                hickory_resolver::net::runtime::TokioRuntimeProvider::default(),
            )
        };
        let opts: &mut ResolverOpts = builder.options_mut();
        opts.timeout = settings.timeout;
        opts.attempts = settings.attempts;
        // /etc/hosts must not answer: it maps 127.0.0.1 to "localhost" and is not what the
        // bot's operator published.
        opts.use_hosts_file = ResolveHosts::Never;
        // Names from PTR answers are absolute; never append search domains.
        opts.ndots = 0;
        // Verdicts are cached above this layer; a small record cache still helps the
        // forward lookups of hosts shared by many addresses.
        opts.cache_size = 1024;
        let inner = builder.build()?;
        let servers = settings.nameservers.len().max(1) as u32;
        let budget = settings.timeout * (settings.attempts.max(1) as u32) * servers
            + Duration::from_millis(100);
        Ok(HickoryResolver { inner, budget })
    }

    async fn bounded<T>(
        &self,
        fut: impl Future<Output = Result<T, NetError>>,
    ) -> Result<T, DnsFailure> {
        match tokio::time::timeout(self.budget, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(classify(&e)),
            Err(_) => Err(DnsFailure::new(
                DnsErrorKind::Timeout,
                "query budget exceeded",
            )),
        }
    }
}

/// Maps a hickory error to our kinds.
pub fn classify(e: &NetError) -> DnsFailure {
    let kind = if e.is_nx_domain() {
        DnsErrorKind::Nxdomain
    } else if e.is_no_records_found() {
        DnsErrorKind::NoData
    } else {
        match e {
            NetError::Timeout => DnsErrorKind::Timeout,
            NetError::Dns(HickoryDnsError::ResponseCode(ResponseCode::ServFail)) => {
                DnsErrorKind::Servfail
            }
            NetError::Dns(HickoryDnsError::ResponseCode(ResponseCode::Refused)) => {
                DnsErrorKind::Refused
            }
            NetError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => DnsErrorKind::Timeout,
            NetError::Io(_) | NetError::NoConnections => DnsErrorKind::Connection,
            _ if e.is_connection_closed() => DnsErrorKind::Connection,
            _ => DnsErrorKind::Other,
        }
    };
    DnsFailure::new(kind, e.to_string())
}

/// A PTR target as a dotted host name built from its wire-format labels, lower-cased, or
/// `None` when a label holds a byte no host name has (a `.` inside a label, `\\`, a space):
/// matched as a presentation string, `x.evil\\.googlebot.com` (labels `x`,
/// `evil.googlebot`, `com`) would end with `.googlebot.com`.
pub fn host_name(name: &Name) -> Option<String> {
    let mut labels = Vec::new();
    for label in name.iter() {
        if !label
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
        {
            return None;
        }
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
    }
    Some(labels.join("."))
}

impl Resolve for HickoryResolver {
    async fn reverse(&self, ip: IpAddr) -> Result<Vec<String>, DnsFailure> {
        let lookup = self.bounded(self.inner.reverse_lookup(ip)).await?;
        // Only PTR data counts; a CNAME (RFC 2317 classless delegation) has already been
        // followed by the resolver and appears as an extra record.
        let names: Vec<String> = lookup
            .answers()
            .iter()
            .filter_map(|r| match &r.data {
                RData::PTR(ptr) => host_name(&ptr.0),
                _ => None,
            })
            .collect();
        if names.is_empty() {
            return Err(DnsFailure::new(DnsErrorKind::NoData, "no PTR records"));
        }
        Ok(names)
    }

    async fn forward(&self, name: &str, family_of: IpAddr) -> Result<Vec<IpAddr>, DnsFailure> {
        let mut fqdn = Name::from_ascii(name)
            .map_err(|e| DnsFailure::new(DnsErrorKind::InvalidName, e.to_string()))?;
        fqdn.set_fqdn(true);
        let lookup = match family_of {
            IpAddr::V4(_) => self.bounded(self.inner.ipv4_lookup(fqdn)).await?,
            IpAddr::V6(_) => self.bounded(self.inner.ipv6_lookup(fqdn)).await?,
        };
        Ok(lookup
            .answers()
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(IpAddr::V4(a.0)),
                RData::AAAA(aaaa) => Some(IpAddr::V6(aaaa.0)),
                _ => None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::matches_any;

    fn name(labels: &[&[u8]]) -> Name {
        Name::from_labels(labels.iter().copied()).unwrap()
    }

    #[test]
    fn host_names_come_from_wire_labels() {
        // One label `evil.googlebot`: its presentation form ends with `.googlebot.com`, and
        // no host name made of it may pass FCrDNS's domain match.
        let escaped = name(&[b"x", b"evil.googlebot", b"com"]);
        assert_eq!(escaped.to_ascii(), "x.evil\\.googlebot.com.");
        let domains = ["googlebot.com".to_string()];
        let host = host_name(&escaped);
        assert!(
            !host.as_deref().is_some_and(|h| matches_any(h, &domains)),
            "{host:?}"
        );
        assert_eq!(host, None);
        assert_eq!(host_name(&name(&[b"a b", b"googlebot", b"com"])), None);
        assert_eq!(
            host_name(&name(&[b"Crawl-1", b"googlebot", b"com"])).as_deref(),
            Some("crawl-1.googlebot.com")
        );
    }
}
