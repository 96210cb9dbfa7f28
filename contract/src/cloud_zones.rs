//! Reverse-DNS zones under which anyone can rent a machine: never FCrDNS proof.
//!
//! FCrDNS proves only that whoever controls the PTR name's zone vouches for the address. A
//! cloud provider gives every customer's address a default PTR name in its own zone (a Google
//! Cloud VM is `<reversed ip>.bc.googleusercontent.com`, an EC2 instance
//! `ec2-<ip>.compute-1.amazonaws.com`), and that name resolves back: a rented VM passes
//! FCrDNS for any such zone. So neither the catalog ([`crate::catalog::Catalog::validate`])
//! nor a sidecar configuration may name one as a verification domain, nor a parent of one
//! (`com`, `azure.com`), which would contain it.

/// A cloud-customer reverse zone and whose it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloudZone {
    /// The zone, lowercase, without a trailing dot.
    pub zone: &'static str,
    /// The provider whose customers' addresses get names in it, and how.
    pub provider: &'static str,
}

/// The known cloud-customer reverse zones: each provider's default PTR names for its
/// customers' addresses, as the provider documents them for its virtual machines.
pub const CLOUD_CUSTOMER_REVERSE_ZONES: &[CloudZone] = &[
    CloudZone {
        zone: "googleusercontent.com",
        provider: "Google Cloud (Compute Engine VMs: <ip>.bc.googleusercontent.com; App Engine: *.gae.googleusercontent.com)",
    },
    CloudZone {
        zone: "amazonaws.com",
        provider: "Amazon Web Services (EC2: ec2-<ip>.<region>.compute.amazonaws.com)",
    },
    CloudZone {
        zone: "compute.internal",
        provider: "Amazon EC2 and Google Compute Engine internal names",
    },
    CloudZone {
        zone: "cloudapp.azure.com",
        provider: "Microsoft Azure (public IP DNS labels: <label>.<region>.cloudapp.azure.com)",
    },
    CloudZone {
        zone: "cloudapp.net",
        provider: "Microsoft Azure (classic cloud services: <name>.cloudapp.net)",
    },
    CloudZone {
        zone: "linodeusercontent.com",
        provider: "Akamai Cloud / Linode (<ip>.ip.linodeusercontent.com)",
    },
    CloudZone {
        zone: "members.linode.com",
        provider: "Linode (older default names: li<n>-<n>.members.linode.com)",
    },
    CloudZone {
        zone: "vultrusercontent.com",
        provider: "Vultr (<ip>.vultrusercontent.com)",
    },
    CloudZone {
        zone: "your-server.de",
        provider: "Hetzner (static.<ip>.clients.your-server.de)",
    },
    CloudZone {
        zone: "contaboserver.net",
        provider: "Contabo (vmi<n>.contaboserver.net)",
    },
    CloudZone {
        zone: "vps.ovh.net",
        provider: "OVHcloud (vps-<id>.vps.ovh.net)",
    },
    CloudZone {
        zone: "scw.cloud",
        provider: "Scaleway (<id>.instances.scw.cloud)",
    },
    CloudZone {
        zone: "sl-reverse.com",
        provider: "IBM Cloud classic / SoftLayer (<ip>.sl-reverse.com)",
    },
    CloudZone {
        zone: "upcloud.host",
        provider: "UpCloud (<ip>.upcloud.host)",
    },
    CloudZone {
        zone: "hstgr.cloud",
        provider: "Hostinger VPS (srv<n>.hstgr.cloud)",
    },
];

/// The cloud-customer zone that `domain` lies in or contains, if any: `domain` equals a zone,
/// ends with `.` + a zone, or a zone ends with `.` + `domain`. Compares whole labels, ASCII
/// case-insensitively, ignoring one trailing dot; `evilamazonaws.com` is not in
/// `amazonaws.com`.
pub fn cloud_customer_zone(domain: &str) -> Option<&'static CloudZone> {
    let d = domain
        .strip_suffix('.')
        .unwrap_or(domain)
        .to_ascii_lowercase();
    if d.is_empty() {
        return None;
    }
    CLOUD_CUSTOMER_REVERSE_ZONES
        .iter()
        .find(|z| within(&d, z.zone) || within(z.zone, &d))
}

/// True when `name` equals `zone` or ends with `.` + `zone` (whole labels).
fn within(name: &str, zone: &str) -> bool {
    name == zone
        || name
            .strip_suffix(zone)
            .is_some_and(|head| head.ends_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_above_and_beside_a_zone() {
        let zone = |d| cloud_customer_zone(d).map(|z| z.zone);
        // In the zone, and the zone itself, in any case, with a root dot.
        assert_eq!(
            zone("1.2.0.192.bc.googleusercontent.com"),
            Some("googleusercontent.com")
        );
        assert_eq!(
            zone("x.gae.googleusercontent.com"),
            Some("googleusercontent.com")
        );
        assert_eq!(
            zone("GoogleUserContent.COM."),
            Some("googleusercontent.com")
        );
        assert_eq!(
            zone("ec2-192-0-2-1.compute-1.amazonaws.com"),
            Some("amazonaws.com")
        );
        // Parents that contain a zone would accept its names too.
        assert_eq!(zone("com"), Some("googleusercontent.com"));
        assert_eq!(zone("azure.com"), Some("cloudapp.azure.com"));
        assert_eq!(zone("linode.com"), Some("members.linode.com"));
        // Look-alikes and vendors' own zones are not cloud zones.
        assert_eq!(zone("evilamazonaws.com"), None);
        assert_eq!(zone("googlebot.com"), None);
        assert_eq!(zone("google.com"), None);
        assert_eq!(zone("crawl.amazonbot.amazon"), None);
        assert_eq!(zone("search.msn.com"), None);
        assert_eq!(zone(""), None);
        assert_eq!(zone("."), None);
    }

    #[test]
    fn zones_are_lowercase_names_without_a_trailing_dot() {
        for z in CLOUD_CUSTOMER_REVERSE_ZONES {
            assert_eq!(z.zone, z.zone.to_ascii_lowercase());
            assert!(z.zone.contains('.') && !z.zone.ends_with('.'), "{}", z.zone);
            assert!(!z.provider.is_empty());
        }
    }
}
