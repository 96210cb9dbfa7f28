//! Clients as logged, and what the top-talker table keeps of each.

use super::CLIENT_NAME_BYTES;
use crawlguard_core::identity::classify::Class;
use std::net::IpAddr;

/// A client address as logged: an IP when it parses, else the text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// A parsed address.
    Ip(IpAddr),
    /// Anything else (a host name).
    Name(Box<str>),
    /// Not logged.
    Unknown,
}

impl Client {
    /// From the logged bytes.
    pub fn from_log(b: Option<&[u8]>) -> Client {
        let Some(b) = b else {
            return Client::Unknown;
        };
        match std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<IpAddr>().ok())
        {
            Some(ip) => Client::Ip(ip.to_canonical()),
            None => Client::Name(
                String::from_utf8_lossy(b.get(..CLIENT_NAME_BYTES).unwrap_or(b)).into(),
            ),
        }
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Client::Ip(ip) => write!(f, "{ip}"),
            Client::Name(n) => f.write_str(n),
            Client::Unknown => f.write_str("-"),
        }
    }
}

/// Per-client payload of the top-talker table.
#[derive(Debug, Clone, Copy, Default)]
pub struct Talker {
    /// Rejections (429/503) counted while the client was tracked.
    pub rejected: u64,
    /// Class of its latest request.
    pub class: Option<Class>,
}
