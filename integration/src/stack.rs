//! [`Stack`]: the real verification stack beside Envoy. Envoy with the crawlguard filter, its
//! cluster `crawlguard_verifier` pointed at the [`Sidecar`], which resolves through a
//! [`Dnsmasq`] serving the test's records. Used by `tests/verify.rs` and
//! `tests/verify_under_attack.rs`.

use crate::dns::{Dnsmasq, Record};
use crate::envoy::Envoy;
use crate::envoy_config::EnvoyOpts;
use crate::sidecar::{Sidecar, SidecarOpts};

/// Envoy with the crawlguard filter, the verifier sidecar behind cluster
/// `crawlguard_verifier`, and (optionally) the DNS server the sidecar asks.
/// Fields drop in declaration order: Envoy first, then the sidecar, then DNS.
pub struct Stack {
    /// Envoy (free ports, the given filter configuration).
    pub envoy: Envoy,
    /// The sidecar.
    pub sidecar: Sidecar,
    /// The DNS server, when the stack was started with records.
    pub dns: Option<Dnsmasq>,
}

impl Stack {
    /// dnsmasq with `records`, the sidecar resolving through it (`sidecar` with its
    /// nameservers replaced), and Envoy started with `envoy` plus cluster
    /// `crawlguard_verifier` pointing at the sidecar.
    pub async fn start(envoy: EnvoyOpts, records: &[Record], sidecar: SidecarOpts) -> Stack {
        let dns = Dnsmasq::start(records).await;
        let sidecar = Sidecar::start(SidecarOpts {
            nameservers: vec![dns.addr()],
            ..sidecar
        })
        .await;
        let envoy = Envoy::start(envoy.real_verifier(sidecar.addr().port())).await;
        Stack {
            envoy,
            sidecar,
            dns: Some(dns),
        }
    }

    /// The sidecar as given (its own nameservers, no DNS server of ours) and Envoy.
    pub async fn start_without_dns(envoy: EnvoyOpts, sidecar: SidecarOpts) -> Stack {
        let sidecar = Sidecar::start(sidecar).await;
        let envoy = Envoy::start(envoy.real_verifier(sidecar.addr().port())).await;
        Stack {
            envoy,
            sidecar,
            dns: None,
        }
    }
}
