//! The catalog's rules ([`Catalog::validate`]): what the filter and the sidecar rely on, each
//! refusal naming the entry and field.

use std::collections::HashSet;

use super::{BotClass, Catalog, CatalogError, MAX_TOKEN_LEN};
use crate::bot_id::is_valid_bot_id;
use crate::cloud_zones::cloud_customer_zone;

impl Catalog {
    /// Checks the rules the filter and the sidecar rely on:
    ///
    /// - ids are valid bot ids and unique;
    /// - every bot has tokens; tokens are lowercase, not blank, at most [`MAX_TOKEN_LEN`]
    ///   bytes, and no token appears twice in the catalog (a second one could never match);
    /// - a crawler class only with `verify: true` (anyone can copy a User-Agent);
    /// - `fcrdns_domains` and `range_urls` only with `verify: true`; domains are lowercase
    ///   host names, never in or above a cloud-customer reverse zone
    ///   ([`crate::cloud_zones`]), range URLs plain `https://` addresses;
    /// - the human rule: every list non-empty, tokens lowercase, not blank, at most
    ///   [`MAX_TOKEN_LEN`] bytes and unique within their list; the non-browser id a valid bot
    ///   id no bot has; the non-browser class `other_bot` or `script`;
    /// - every bot and the human rule cite a known source, every source is cited and has an
    ///   http(s) URL.
    pub fn validate(&self) -> Result<(), CatalogError> {
        let mut ids = HashSet::new();
        let mut tokens = HashSet::new();
        let mut cited = HashSet::new();
        for (i, b) in self.bots.iter().enumerate() {
            let err = |field: &str, why: String| {
                Err(CatalogError(format!("bots[{i}] ({}).{field}: {why}", b.id)))
            };
            if !is_valid_bot_id(&b.id) {
                return err("id", "must be 1..=64 bytes of [a-z0-9._-]".into());
            }
            if !ids.insert(b.id.as_str()) {
                return err("id", "duplicate id".into());
            }
            if b.ua_contains.is_empty() {
                return err("ua_contains", "must not be empty".into());
            }
            for t in &b.ua_contains {
                if t.trim().is_empty() || t.len() > MAX_TOKEN_LEN {
                    return err("ua_contains", format!("{t:?} is blank or too long"));
                }
                if *t != t.to_ascii_lowercase() {
                    return err("ua_contains", format!("{t:?} is not lowercase"));
                }
                if !tokens.insert(t.as_str()) {
                    return err("ua_contains", format!("{t:?} is already an earlier token"));
                }
            }
            if b.class.is_crawler() && !b.verify {
                return err("class", format!("{} needs verify: true", b.class.as_str()));
            }
            let has_methods = !b.fcrdns_domains.is_empty() || !b.range_urls.is_empty();
            if has_methods && !b.verify {
                return err(
                    "verify",
                    "fcrdns_domains and range_urls need verify: true".into(),
                );
            }
            if let Some(d) = b.fcrdns_domains.iter().find(|d| !is_domain(d)) {
                return err(
                    "fcrdns_domains",
                    format!("{d:?} is not a lowercase host name"),
                );
            }
            if let Some((d, z)) = b
                .fcrdns_domains
                .iter()
                .find_map(|d| cloud_customer_zone(d).map(|z| (d, z)))
            {
                return err(
                    "fcrdns_domains",
                    format!(
                        "{d:?} is no proof: it is in or contains {}, under which anyone can \
                         rent a machine ({})",
                        z.zone, z.provider
                    ),
                );
            }
            if let Some(u) = b.range_urls.iter().find(|u| !is_range_url(u)) {
                return err("range_urls", format!("{u:?} is not a plain https:// URL"));
            }
            if !self.sources.contains_key(&b.source) {
                return err("source", format!("{:?} is not in sources", b.source));
            }
            cited.insert(b.source.as_str());
        }
        self.validate_human(&ids)?;
        cited.insert(self.human.source.as_str());
        cited.extend(self.validate_browser_checks()?);
        cited.extend(self.validate_signed_agents(&ids)?);
        for (key, s) in &self.sources {
            if !cited.contains(key.as_str()) {
                return Err(CatalogError(format!(
                    "sources.{key}: cited by no bot, rule or check"
                )));
            }
            if s.name.trim().is_empty()
                || !(s.url.starts_with("https://") || s.url.starts_with("http://"))
            {
                return Err(CatalogError(format!(
                    "sources.{key}: needs a name and an http(s) url"
                )));
            }
        }
        Ok(())
    }

    /// The human rule's part of [`Catalog::validate`]; `ids` are the bots' ids.
    fn validate_human(&self, ids: &HashSet<&str>) -> Result<(), CatalogError> {
        let h = &self.human;
        let err = |field: &str, why: String| Err(CatalogError(format!("human.{field}: {why}")));
        if !is_valid_bot_id(&h.non_browser_id) {
            return err(
                "non_browser_id",
                "must be 1..=64 bytes of [a-z0-9._-]".into(),
            );
        }
        if ids.contains(h.non_browser_id.as_str()) {
            return err("non_browser_id", "is the id of a bot".into());
        }
        if !matches!(h.non_browser_class, BotClass::OtherBot | BotClass::Script) {
            return err(
                "non_browser_class",
                format!(
                    "{} is not other_bot or script",
                    h.non_browser_class.as_str()
                ),
            );
        }
        let Some(generic) = self.bots.iter().find(|b| b.id == h.generic_markers_id) else {
            return err(
                "generic_markers_id",
                format!("{:?} is not the id of a bot", h.generic_markers_id),
            );
        };
        if let Some(t) = h
            .markers_in_platform_section
            .iter()
            .find(|t| !generic.ua_contains.contains(t))
        {
            return err(
                "markers_in_platform_section",
                format!("{t:?} is not a token of {}", generic.id),
            );
        }
        for (name, list) in h.lists() {
            if list.is_empty() {
                return err(name, "must not be empty".into());
            }
            let mut seen = HashSet::new();
            for t in list {
                if t.trim().is_empty() || t.len() > MAX_TOKEN_LEN {
                    return err(name, format!("{t:?} is blank or too long"));
                }
                if *t != t.to_ascii_lowercase() {
                    return err(name, format!("{t:?} is not lowercase"));
                }
                if !seen.insert(t.as_str()) {
                    return err(name, format!("{t:?} is listed twice"));
                }
            }
        }
        if !self.sources.contains_key(&h.source) {
            return err("source", format!("{:?} is not in sources", h.source));
        }
        Ok(())
    }
}

/// A lowercase DNS host name of at least two labels: labels of 1..=63 bytes of `[a-z0-9-]`,
/// not starting or ending with `-`, 253 bytes at most.
fn is_domain(d: &str) -> bool {
    d.len() <= 253
        && d.split('.').count() >= 2
        && d.split('.').all(|l| {
            (1..=63).contains(&l.len())
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// A plain `https://` address: at most 256 bytes of printable ASCII without spaces, quotes,
/// angle brackets, backslashes or a fragment, with a lowercase host name and a path.
pub fn is_range_url(u: &str) -> bool {
    let Some(rest) = u.strip_prefix("https://") else {
        return false;
    };
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    u.len() <= 256
        && u.bytes()
            .all(|b| b.is_ascii_graphic() && !b"\"'<>\\#`".contains(&b))
        && is_domain(host)
        && path.len() > 1
}

#[cfg(test)]
mod tests {
    use super::super::markdown::url_file_name;
    use super::*;

    /// A minimal valid human rule citing source `s`.
    const HUMAN: &str = r#""human":{"non_browser_id":"nb","non_browser_class":"other_bot",
        "platform_section_after":["mozilla/"],"device_platforms":["iphone"],
        "desktop_platforms":["windows"],"browser_tokens":["gecko"],"browser_forms":["netfront"],
        "generic_markers_id":"x","markers_in_platform_section":["x"],"source":"s"}"#;

    fn one_bot(fields: &str) -> String {
        format!(
            r#"{{"sources":{{"s":{{"name":"S","url":"https://s.example"}}}},
                "bots":[{{"id":"x","ua_contains":["x"],"class":"other_bot","verify":false,"source":"s"{fields}}}],
                {HUMAN}}}"#
        )
    }

    fn refused(json: &str) -> String {
        match Catalog::parse(json) {
            Ok(_) => panic!("accepted: {json}"),
            Err(e) => e.0,
        }
    }

    #[test]
    fn every_rule_is_enforced_with_the_field_named() {
        assert!(Catalog::parse(&one_bot("")).is_ok());
        let bad = |from: &str, to: &str| refused(&one_bot("").replacen(from, to, 1));
        assert_eq!(
            bad(r#""id":"x""#, r#""id":"X""#),
            "bots[0] (X).id: must be 1..=64 bytes of [a-z0-9._-]"
        );
        assert_eq!(
            bad(r#"["x"]"#, "[]"),
            "bots[0] (x).ua_contains: must not be empty"
        );
        assert_eq!(
            bad(r#"["x"]"#, r#"["X"]"#),
            "bots[0] (x).ua_contains: \"X\" is not lowercase"
        );
        assert_eq!(
            bad(r#"["x"]"#, r#"[" "]"#),
            "bots[0] (x).ua_contains: \" \" is blank or too long"
        );
        assert_eq!(
            bad(r#"["x"]"#, r#"["x","x"]"#),
            "bots[0] (x).ua_contains: \"x\" is already an earlier token"
        );
        assert_eq!(
            bad("other_bot", "ai_trainer"),
            "bots[0] (x).class: ai_trainer needs verify: true"
        );
        assert!(bad("other_bot", "spoofed").starts_with("bots.json: unknown variant `spoofed`"));
        assert_eq!(
            refused(&one_bot(r#","fcrdns_domains":["x.example"]"#)),
            "bots[0] (x).verify: fcrdns_domains and range_urls need verify: true"
        );
        let verified = |f: &str| one_bot(f).replace("false", "true");
        assert!(Catalog::parse(&verified(
            r#","fcrdns_domains":["x.example"],"range_urls":["https://x.example/x.json"]"#
        ))
        .is_ok());
        assert_eq!(
            refused(&verified(r#","fcrdns_domains":["X.example"]"#)),
            "bots[0] (x).fcrdns_domains: \"X.example\" is not a lowercase host name"
        );
        assert_eq!(
            refused(&verified(
                r#","fcrdns_domains":["x.example","googleusercontent.com"]"#
            )),
            "bots[0] (x).fcrdns_domains: \"googleusercontent.com\" is no proof: it is in or \
             contains googleusercontent.com, under which anyone can rent a machine (Google \
             Cloud (Compute Engine VMs: <ip>.bc.googleusercontent.com; App Engine: \
             *.gae.googleusercontent.com))"
        );
        assert!(refused(&verified(
            r#","fcrdns_domains":["compute-1.amazonaws.com"]"#
        ))
        .contains("it is in or contains amazonaws.com, under which"));
        assert_eq!(
            refused(&verified(r#","range_urls":["http://x.example/x.json"]"#)),
            "bots[0] (x).range_urls: \"http://x.example/x.json\" is not a plain https:// URL"
        );
        assert_eq!(
            bad(r#""source":"s""#, r#""source":"t""#),
            "bots[0] (x).source: \"t\" is not in sources"
        );
        assert_eq!(
            bad(r#""url":"https://s.example""#, r#""url":"s.example""#),
            "sources.s: needs a name and an http(s) url"
        );
        assert!(refused(&one_bot(r#","domains":[]"#)).contains("unknown field `domains`"));
    }

    #[test]
    fn the_human_rule_is_validated_with_the_field_named() {
        let bad = |from: &str, to: &str| refused(&one_bot("").replacen(from, to, 1));
        assert_eq!(
            bad(r#""non_browser_id":"nb""#, r#""non_browser_id":"N B""#),
            "human.non_browser_id: must be 1..=64 bytes of [a-z0-9._-]"
        );
        assert_eq!(
            bad(r#""non_browser_id":"nb""#, r#""non_browser_id":"x""#),
            "human.non_browser_id: is the id of a bot"
        );
        assert_eq!(
            bad(
                r#""non_browser_class":"other_bot""#,
                r#""non_browser_class":"search_crawler""#
            ),
            "human.non_browser_class: search_crawler is not other_bot or script"
        );
        assert_eq!(
            bad(r#"["iphone"]"#, "[]"),
            "human.device_platforms: must not be empty"
        );
        assert_eq!(
            bad(r#"["windows"]"#, r#"["Windows"]"#),
            "human.desktop_platforms: \"Windows\" is not lowercase"
        );
        assert_eq!(
            bad(r#"["gecko"]"#, r#"["gecko","gecko"]"#),
            "human.browser_tokens: \"gecko\" is listed twice"
        );
        assert_eq!(
            bad(r#"["netfront"]"#, r#"["  "]"#),
            "human.browser_forms: \"  \" is blank or too long"
        );
        assert_eq!(
            bad(r#""generic_markers_id":"x""#, r#""generic_markers_id":"y""#),
            "human.generic_markers_id: \"y\" is not the id of a bot"
        );
        assert_eq!(
            bad(
                r#""markers_in_platform_section":["x"]"#,
                r#""markers_in_platform_section":["bot/"]"#
            ),
            "human.markers_in_platform_section: \"bot/\" is not a token of x"
        );
        assert_eq!(
            bad(
                r#""markers_in_platform_section":["x"]"#,
                r#""markers_in_platform_section":[]"#
            ),
            "human.markers_in_platform_section: must not be empty"
        );
        assert_eq!(
            bad(r#""source":"s"}}"#, r#""source":"t"}}"#),
            "human.source: \"t\" is not in sources"
        );
        assert!(bad(r#""human":{"#, r#""human":{"extra":1,"#).contains("unknown field `extra`"));
    }

    #[test]
    fn a_second_bot_with_the_same_id_is_refused() {
        let json = one_bot("").replace(
            r#""source":"s"}]"#,
            r#""source":"s"},{"id":"x","ua_contains":["y"],"class":"other_bot","verify":false,"source":"s"}]"#,
        );
        assert_eq!(refused(&json), "bots[1] (x).id: duplicate id");
    }

    #[test]
    fn domain_and_file_name_rules() {
        for d in ["googlebot.com", "crawl.amazonbot.amazon", "a-1.b.example"] {
            assert!(is_domain(d), "{d}");
        }
        for d in [
            "com", "", "-a.com", "a-.com", "a..com", "a.com.", "A.com", "*.a.com",
        ] {
            assert!(!is_domain(d), "{d}");
        }
        for u in [
            "https://openai.com/gptbot.json",
            "https://developers.google.com/static/crawling/ipranges/common-crawlers.json",
            "https://x.example/list?format=json",
        ] {
            assert!(is_range_url(u), "{u}");
        }
        for u in [
            "http://openai.com/gptbot.json",
            "https://openai.com",
            "https://openai.com/",
            "https://Openai.com/a.json",
            "https://openai.com/a b.json",
            "https://openai.com/a.json#x",
            "https://user@openai.com/a.json",
            "gptbot.json",
        ] {
            assert!(!is_range_url(u), "{u}");
        }
        assert_eq!(
            url_file_name("https://openai.com/gptbot.json"),
            "gptbot.json"
        );
    }
}
