//! What a limit's bucket is keyed by (`limits[].key`): [`KeyKind`], its parts and its
//! configuration spelling.

/// What a limit's bucket is keyed by (`limits[].key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyKind {
    /// The client address, grouped by the configured prefix lengths (or the limit's own,
    /// [`super::Limit::address_prefix`]).
    ClientIp,
    /// One bucket for every matching request.
    Global,
    /// The value of a request header (lowercase name); a missing header is its own key.
    Header(String),
    /// The catalog bot id the User-Agent names (`googlebot`, `declared-bot`, `non-browser`):
    /// one bucket per crawler operator across all its addresses. A request naming none
    /// (`human`, a blank User-Agent) is not charged.
    Bot,
    /// The request path without its query string: one bucket per URL path (a herd of clients
    /// on one page).
    Path,
    /// The client's autonomous system, from `client_signals.asn_header`: one bucket per
    /// network. A request without a readable ASN (or with no `asn_header` configured) is not
    /// charged.
    Asn,
    /// One bucket per combination of its parts' values: 2..=4 distinct parts, each
    /// `ClientIp`, `Header`, `Bot`, `Path` or `Asn`.
    Compound(Vec<KeyKind>),
}

impl KeyKind {
    /// Short name for logs: `client_ip`, `global`, `header`, `bot`, `path`, `asn` or
    /// `compound`.
    pub fn kind_str(&self) -> &'static str {
        match self {
            KeyKind::ClientIp => "client_ip",
            KeyKind::Global => "global",
            KeyKind::Header(_) => "header",
            KeyKind::Bot => "bot",
            KeyKind::Path => "path",
            KeyKind::Asn => "asn",
            KeyKind::Compound(_) => "compound",
        }
    }

    /// The key's parts: itself, or a compound key's members.
    pub fn parts(&self) -> &[KeyKind] {
        match self {
            KeyKind::Compound(parts) => parts,
            k => std::slice::from_ref(k),
        }
    }

    /// The header a part reads, if it is a `header:<name>` part.
    pub fn header_name(&self) -> Option<&str> {
        match self {
            KeyKind::Header(name) => Some(name),
            _ => None,
        }
    }

    /// Whether a part is the bot id.
    pub fn has_bot(&self) -> bool {
        self.parts().contains(&KeyKind::Bot)
    }

    /// Whether a part is the client's autonomous system.
    pub fn has_asn(&self) -> bool {
        self.parts().contains(&KeyKind::Asn)
    }

    /// Whether a part is the client address.
    pub fn has_client_ip(&self) -> bool {
        self.parts().contains(&KeyKind::ClientIp)
    }

    /// Whether anyone can name the value of one of its parts for another client's traffic
    /// (`bot`, `header:user-agent`): in a limit of every class (`"*"`) the class is part of
    /// the bucket's identity, so spoofed claims (class `spoofed`) never spend the bucket of
    /// the verified crawler whose User-Agent they copy.
    pub fn keyed_by_claim(&self) -> bool {
        self.parts()
            .iter()
            .any(|p| matches!(p, KeyKind::Bot) || p.header_name() == Some("user-agent"))
    }
}

impl std::fmt::Display for KeyKind {
    /// The configuration's form: `client_ip`, `global`, `header:<name>`, `bot`, `path`, or a
    /// compound key's parts joined by ` + `.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyKind::Header(h) => write!(f, "header:{h}"),
            KeyKind::Compound(parts) => {
                for (i, p) in parts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" + ")?;
                    }
                    write!(f, "{p}")?;
                }
                Ok(())
            }
            k => f.write_str(k.kind_str()),
        }
    }
}
