//! One signed request: its Web Bot Auth signature read and checked (RFC 9421 HTTP Message
//! Signatures over RFC 8941 structured fields, with draft-meunier-web-bot-auth-architecture's
//! rules), up to the point where the key is needed ([`prepare`]), then verified with it
//! ([`Prepared::verify`]).
//!
//! What is checked, in order, each failure with its own [`Outcome`]:
//! 1. `Signature-Input` parses as a Dictionary and one member is an Inner List whose
//!    parameters have `tag="web-bot-auth"` (the first such member is the signature);
//! 2. `keyid` (a String), `created` and `expires` (Integers) are there, `alg`, if present,
//!    is `ed25519`;
//! 3. `created` is not after now + skew, `expires` not before now - skew, and `expires -
//!    created` at most `max_validity_s`;
//! 4. the covered components include `@authority` or `@target-uri`, and `signature-agent`
//!    when the request has that header; every covered field is present;
//! 5. `Signature-Agent` names an origin (the member the covered component's `key` names, or
//!    the whole field as an sf-string, the form ChatGPT agent sends);
//! 6. `Signature` has a 64-byte Byte Sequence under the same label.
//!
//! The signature base is RFC 9421 section 2.5's: one line per covered component,
//! `<component identifier>: <value>`, then `"@signature-params": <inner list>`, every
//! identifier and the parameters in canonical RFC 8941 serialization.

use crawlguard_contract::signature::{Outcome, Request};
use sfv::{BareItem, ListEntry, Parser, SerializeValue};

/// The checks' settings (the sidecar's `[agents]` section).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Clock difference allowed on `created` and `expires`, seconds.
    pub max_skew_s: u64,
    /// Longest `expires - created` accepted, seconds.
    pub max_validity_s: u64,
}

/// A signature that passed every check but the cryptographic one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The agent origin `Signature-Agent` names (no trailing slash).
    pub agent: String,
    /// `keyid`: the key's JWK thumbprint (RFC 7638), base64url.
    pub keyid: String,
    /// `nonce`, if any.
    pub nonce: Option<String>,
    /// `expires`, seconds since the Unix epoch.
    pub expires: u64,
    /// The signature base.
    pub base: String,
    /// The signature bytes.
    pub signature: [u8; 64],
}

/// Why a signature was refused before its key was needed, with what could be read of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The reason.
    pub outcome: Outcome,
    /// The agent origin, when it could be read.
    pub agent: String,
    /// The `keyid`, when it could be read.
    pub keyid: String,
}

impl Prepared {
    /// Verifies the signature with `key` (a raw 32-byte ed25519 public key, RFC 8032):
    /// [`Outcome::Verified`] or [`Outcome::BadSignature`]. Strict verification: no small-order
    /// keys, canonical `S` (ed25519-dalek's `verify_strict`).
    pub fn verify(&self, key: &[u8; 32]) -> Outcome {
        let Ok(k) = ed25519_dalek::VerifyingKey::from_bytes(key) else {
            return Outcome::BadSignature;
        };
        let sig = ed25519_dalek::Signature::from_bytes(&self.signature);
        match k.verify_strict(self.base.as_bytes(), &sig) {
            Ok(()) => Outcome::Verified,
            Err(_) => Outcome::BadSignature,
        }
    }
}

/// Every line of field `name` of `req`, combined as RFC 9421 section 2.1 says (each value
/// trimmed, joined by `, `); `None` when the request has no such field.
fn field(req: &Request, name: &str) -> Option<String> {
    let lines: Vec<&str> = req
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
        .collect();
    (!lines.is_empty()).then(|| lines.join(", "))
}

/// Reads and checks the signature of `req` at `now_s` (seconds since the Unix epoch).
pub fn prepare(req: &Request, now_s: u64, window: Window) -> Result<Prepared, Refused> {
    let refuse = |outcome, agent: &str, keyid: &str| Refused {
        outcome,
        agent: agent.to_string(),
        keyid: keyid.to_string(),
    };
    let malformed = || refuse(Outcome::Malformed, "", "");
    let input = field(req, "signature-input").ok_or_else(|| refuse(Outcome::MissingTag, "", ""))?;
    let input = Parser::new(&input)
        .parse_dictionary()
        .map_err(|_| malformed())?;
    let tagged = input.iter().find_map(|(label, entry)| match entry {
        ListEntry::InnerList(list)
            if list
                .params
                .get("tag")
                .and_then(BareItem::as_string)
                .is_some_and(|t| t.as_str() == "web-bot-auth") =>
        {
            Some((label, list))
        }
        _ => None,
    });
    let (label, list) = tagged.ok_or_else(|| refuse(Outcome::MissingTag, "", ""))?;
    let p = &list.params;
    let keyid = match p.get("keyid").map(BareItem::as_string) {
        Some(Some(k)) => k.as_str().to_string(),
        _ => return Err(malformed()),
    };
    let agent_of = |req: &Request| signature_agent(req, list).unwrap_or_default();
    let int = |name: &str| p.get(name).and_then(BareItem::as_integer).map(i64::from);
    let (Some(created), Some(expires)) = (int("created"), int("expires")) else {
        return Err(refuse(Outcome::Malformed, &agent_of(req), &keyid));
    };
    let (Ok(created), Ok(expires)) = (u64::try_from(created), u64::try_from(expires)) else {
        return Err(refuse(Outcome::Malformed, &agent_of(req), &keyid));
    };
    let reason = match p.get("alg") {
        Some(a) if a.as_string().map(|s| s.as_str()) != Some("ed25519") => {
            Some(Outcome::UnsupportedAlg)
        }
        _ if expires < created => Some(Outcome::Malformed),
        _ if created > now_s.saturating_add(window.max_skew_s) => Some(Outcome::CreatedInFuture),
        _ if expires.saturating_add(window.max_skew_s) <= now_s => Some(Outcome::Expired),
        _ if expires - created > window.max_validity_s => Some(Outcome::ValidityTooLong),
        _ => None,
    };
    if let Some(outcome) = reason {
        return Err(refuse(outcome, &agent_of(req), &keyid));
    }
    let names: Vec<&str> = list
        .items
        .iter()
        .filter_map(|i| i.bare_item.as_string().map(|s| s.as_str()))
        .collect();
    let has_agent_field = field(req, "signature-agent").is_some();
    if names.len() != list.items.len()
        || !(names.contains(&"@authority") || names.contains(&"@target-uri"))
        || (has_agent_field && !names.contains(&"signature-agent"))
    {
        return Err(refuse(Outcome::MissingComponent, &agent_of(req), &keyid));
    }
    let Some(agent) = signature_agent(req, list) else {
        return Err(refuse(Outcome::UnknownAgent, "", &keyid));
    };
    let signature = field(req, "signature")
        .and_then(|s| Parser::new(&s).parse_dictionary().ok())
        .and_then(|d| match d.get(label) {
            Some(ListEntry::Item(i)) => i
                .bare_item
                .as_byte_sequence()
                .and_then(|b| <[u8; 64]>::try_from(b).ok()),
            _ => None,
        })
        .ok_or_else(|| refuse(Outcome::Malformed, &agent, &keyid))?;
    let base = signature_base(req, list).map_err(|o| refuse(o, &agent, &keyid))?;
    Ok(Prepared {
        agent,
        keyid,
        nonce: p
            .get("nonce")
            .and_then(BareItem::as_string)
            .map(|s| s.as_str().to_string()),
        expires,
        base,
        signature,
    })
}

/// The agent origin the signature names: `Signature-Agent`'s member under the covered
/// component's `key` parameter, else the whole field as an sf-string (a Dictionary of one
/// member is read as that member). A trailing `/` is dropped. `None`: no such field, or no
/// string in it.
fn signature_agent(req: &Request, list: &sfv::InnerList) -> Option<String> {
    let value = field(req, "signature-agent")?;
    let key = list.items.iter().find_map(|i| {
        (i.bare_item.as_string().map(|s| s.as_str()) == Some("signature-agent"))
            .then(|| i.params.get("key").and_then(BareItem::as_string))
            .flatten()
    });
    let text = match key {
        Some(k) => match Parser::new(&value)
            .parse_dictionary()
            .ok()?
            .get(k.as_str())?
        {
            ListEntry::Item(i) => i.bare_item.as_string()?.as_str().to_string(),
            ListEntry::InnerList(_) => return None,
        },
        None => match Parser::new(&value).parse_item() {
            Ok(i) => i.bare_item.as_string()?.as_str().to_string(),
            Err(_) => {
                let d = Parser::new(&value).parse_dictionary().ok()?;
                match d.values().next() {
                    Some(ListEntry::Item(i)) if d.len() == 1 => {
                        i.bare_item.as_string()?.as_str().to_string()
                    }
                    _ => return None,
                }
            }
        },
    };
    Some(text.strip_suffix('/').unwrap_or(&text).to_string())
}

/// `@authority` as RFC 9421 section 2.2.3 normalises it: lower case, without the scheme's
/// default port.
fn authority(req: &Request) -> String {
    let a = req.authority.to_ascii_lowercase();
    let default = if req.scheme.eq_ignore_ascii_case("https") {
        ":443"
    } else {
        ":80"
    };
    a.strip_suffix(default).map_or(a.clone(), str::to_string)
}

/// The value of one covered component (RFC 9421 sections 2.1 and 2.2).
fn component_value(req: &Request, item: &sfv::Item) -> Result<String, Outcome> {
    let name = item
        .bare_item
        .as_string()
        .map(|s| s.as_str())
        .ok_or(Outcome::Malformed)?;
    let (path, query) = match req.path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (req.path.as_str(), None),
    };
    let derived = match name {
        "@method" => Some(req.method.clone()),
        "@authority" => Some(authority(req)),
        "@scheme" => Some(req.scheme.to_ascii_lowercase()),
        "@target-uri" => Some(format!(
            "{}://{}{}",
            req.scheme.to_ascii_lowercase(),
            authority(req),
            req.path
        )),
        "@request-target" => Some(req.path.clone()),
        "@path" => Some(if path.is_empty() { "/" } else { path }.to_string()),
        "@query" => Some(format!("?{}", query.unwrap_or_default())),
        n if n.starts_with('@') => return Err(Outcome::MissingComponent),
        _ => None,
    };
    if let Some(v) = derived {
        if !item.params.is_empty() {
            return Err(Outcome::Malformed);
        }
        return Ok(v);
    }
    if name != name.to_ascii_lowercase() {
        return Err(Outcome::Malformed);
    }
    let value = field(req, name).ok_or(Outcome::MissingComponent)?;
    match (item.params.len(), item.params.get("key")) {
        (0, _) => Ok(value),
        (1, Some(key)) => {
            let key = key.as_string().ok_or(Outcome::Malformed)?;
            let dict = Parser::new(&value)
                .parse_dictionary()
                .map_err(|_| Outcome::Malformed)?;
            match dict.get(key.as_str()).ok_or(Outcome::MissingComponent)? {
                ListEntry::Item(i) => Ok(i.serialize_value()),
                entry @ ListEntry::InnerList(_) => vec![entry.clone()]
                    .serialize_value()
                    .ok_or(Outcome::Malformed),
            }
        }
        // `sf`, `bs`, `req`, `tr`: not used by Web Bot Auth agents.
        _ => Err(Outcome::Malformed),
    }
}

/// The signature base of `req` for the covered components and parameters of `list`.
fn signature_base(req: &Request, list: &sfv::InnerList) -> Result<String, Outcome> {
    let mut out = String::new();
    for item in &list.items {
        let value = component_value(req, item)?;
        out.push_str(&item.serialize_value());
        out.push_str(": ");
        out.push_str(&value);
        out.push('\n');
    }
    let params = vec![ListEntry::InnerList(list.clone())]
        .serialize_value()
        .ok_or(Outcome::Malformed)?;
    out.push_str("\"@signature-params\": ");
    out.push_str(&params);
    if out.is_ascii() && !out.contains('\r') {
        Ok(out)
    } else {
        Err(Outcome::Malformed)
    }
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
