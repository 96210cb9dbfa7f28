//! The catalog's signed agents (`signed_agents` in `contract/catalog/bots.json`): AI agents
//! that browse for a person with a browser User-Agent from cloud addresses and prove who
//! they are by signing their requests (Web Bot Auth: RFC 9421 HTTP Message Signatures with
//! `tag="web-bot-auth"`, draft-meunier-web-bot-auth-architecture, and a key directory at
//! `<origin>/.well-known/http-message-signatures-directory`,
//! draft-meunier-http-message-signatures-directory). The filter recognises an agent by the
//! origin its `Signature-Agent` header names; the sidecar fetches only these origins' key
//! directories (plus the operator's own).

use super::{BotClass, Catalog, CatalogError};
use crate::bot_id::is_valid_bot_id;
use serde::{Deserialize, Serialize};

/// One signing agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedAgent {
    /// Bot id (`[a-z0-9._-]{1,64}`, no bot's id): the `bot` limit key of its verified
    /// requests, one bucket per agent.
    pub id: String,
    /// The origin its `Signature-Agent` names, `https://<host>[:<port>]` without a path
    /// ([`is_agent_origin`]); its key directory is at
    /// `<origin>/.well-known/http-message-signatures-directory`.
    pub origin: String,
    /// The class a verified signature gets: a crawler class (`ai_retriever` for an agent
    /// acting for a person right now).
    pub class: BotClass,
    /// Key into [`Catalog::sources`]: the operator's documentation of its signatures.
    pub source: String,
    /// Why the entry looks like this.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
}

/// The path of an agent's key directory under its origin
/// (draft-meunier-http-message-signatures-directory, section 4).
pub const DIRECTORY_PATH: &str = "/.well-known/http-message-signatures-directory";

/// Longest agent origin, bytes.
pub const MAX_ORIGIN_LEN: usize = 256;

/// An agent origin as `Signature-Agent` names it and the allowlists hold it:
/// `https://` then a lowercase host name or IP literal (`[v6]` for IPv6) and an optional
/// `:port`, with no path, query, user or trailing slash; at most [`MAX_ORIGIN_LEN`] bytes.
pub fn is_agent_origin(origin: &str) -> bool {
    let Some(rest) = origin.strip_prefix("https://") else {
        return false;
    };
    let host_port_ok = !rest.is_empty()
        && rest
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.:[]".contains(&b));
    let port_ok = match rest.rsplit_once(':') {
        // An IPv6 literal has colons inside its brackets.
        Some((host, port)) if !port.contains(']') => {
            !host.is_empty() && !port.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        }
        _ => true,
    };
    origin.len() <= MAX_ORIGIN_LEN && host_port_ok && port_ok && !rest.starts_with(':')
}

impl Catalog {
    /// The signed agents' part of [`Catalog::validate`]: valid, unique ids that no bot has,
    /// unique [`is_agent_origin`] origins, a crawler class, a known source. `bot_ids` are the
    /// bots' ids. Returns the sources the agents cite.
    pub(super) fn validate_signed_agents(
        &self,
        bot_ids: &std::collections::HashSet<&str>,
    ) -> Result<Vec<&str>, CatalogError> {
        let mut ids = std::collections::HashSet::new();
        let mut origins = std::collections::HashSet::new();
        let mut cited = Vec::new();
        for (i, a) in self.signed_agents.iter().enumerate() {
            let err = |field: &str, why: String| {
                Err(CatalogError(format!(
                    "signed_agents[{i}] ({}).{field}: {why}",
                    a.id
                )))
            };
            if !is_valid_bot_id(&a.id) {
                return err("id", "must be 1..=64 bytes of [a-z0-9._-]".into());
            }
            if bot_ids.contains(a.id.as_str()) || !ids.insert(a.id.as_str()) {
                return err("id", "already a bot's or another agent's id".into());
            }
            if !is_agent_origin(&a.origin) {
                return err(
                    "origin",
                    format!(
                        "{:?} is not https://<host>[:<port>] without a path",
                        a.origin
                    ),
                );
            }
            if !origins.insert(a.origin.as_str()) {
                return err("origin", "duplicate origin".into());
            }
            if !a.class.is_crawler() {
                return err(
                    "class",
                    "must be a crawler class: a verified signature is proof".into(),
                );
            }
            if !self.sources.contains_key(&a.source) {
                return err("source", format!("{:?} is not in sources", a.source));
            }
            cited.push(a.source.as_str());
        }
        Ok(cited)
    }

    /// The README's table of signed agents: id, origin, class, source.
    pub fn markdown_signed_agents(&self) -> String {
        let mut out =
            String::from("| id | Signature-Agent origin | class | source |\n|---|---|---|---|\n");
        for a in &self.signed_agents {
            let source = self
                .sources
                .get(&a.source)
                .map_or_else(String::new, |s| format!("[{}]({})", s.name, s.url));
            out.push_str(&format!(
                "| `{}` | `{}` | {} | {} |\n",
                a.id,
                a.origin,
                a.class.as_str(),
                source
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_origins_are_https_hosts_without_a_path() {
        for ok in [
            "https://chatgpt.com",
            "https://agent.example.com:8443",
            "https://127.0.0.1:4443",
            "https://[::1]:4443",
        ] {
            assert!(is_agent_origin(ok), "{ok}");
        }
        for bad in [
            "http://chatgpt.com",
            "https://chatgpt.com/",
            "https://chatgpt.com/x",
            "https://ChatGPT.com",
            "https://",
            "https://a.com:0",
            "https://a.com:99999",
            "https://a.com:",
            "https://user@a.com",
            "https://a.com?x",
            "chatgpt.com",
        ] {
            assert!(!is_agent_origin(bad), "{bad}");
        }
    }

    #[test]
    fn the_builtin_agents_are_valid_and_cite_their_operator() {
        let c = Catalog::builtin().unwrap();
        let chatgpt = c
            .signed_agents
            .iter()
            .find(|a| a.id == "chatgpt-agent")
            .unwrap();
        assert_eq!(chatgpt.origin, "https://chatgpt.com");
        assert_eq!(chatgpt.class, BotClass::AiRetriever);
        assert!(c.sources.contains_key(&chatgpt.source));
    }

    #[test]
    fn a_bad_agent_is_refused_with_its_field() {
        let mut c = Catalog::builtin().unwrap();
        let mut a = c.signed_agents[0].clone();
        a.id = "googlebot".into();
        c.signed_agents.push(a);
        let e = c.validate().unwrap_err().0;
        assert!(e.contains("(googlebot).id: already a bot's"), "{e}");
        let mut c = Catalog::builtin().unwrap();
        c.signed_agents[0].origin = "http://chatgpt.com".into();
        let e = c.validate().unwrap_err().0;
        assert!(
            e.contains(".origin: \"http://chatgpt.com\" is not https://"),
            "{e}"
        );
        let mut c = Catalog::builtin().unwrap();
        c.signed_agents[0].class = BotClass::OtherBot;
        let e = c.validate().unwrap_err().0;
        assert!(e.contains(".class: must be a crawler class"), "{e}");
    }
}
