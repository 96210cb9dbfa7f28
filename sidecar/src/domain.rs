//! Host-name helpers for FCrDNS: normalisation and label-boundary suffix matching.

/// Lower-cases a DNS name and strips one trailing root dot, so that names coming from
/// PTR answers (`Crawl-1.GoogleBot.com.`) and names from configuration (`googlebot.com`)
/// compare equal. DNS names are case-insensitive (RFC 4343).
pub fn normalize_name(name: &str) -> String {
    let trimmed = name.trim();
    let trimmed = trimmed.strip_suffix('.').unwrap_or(trimmed);
    trimmed.to_ascii_lowercase()
}

/// True when `host` equals `domain` or ends with `.domain`, comparing whole labels.
///
/// `googlebot.com` matches `googlebot.com` and `crawl-66-249-66-1.googlebot.com`, but not
/// `evilgooglebot.com`: a plain `ends_with` would let anyone who registers a look-alike
/// domain pass verification. Case and a trailing dot on either side are ignored. An empty
/// domain (or `.`) matches nothing, so a configuration typo can never verify every host.
pub fn matches_domain(host: &str, domain: &str) -> bool {
    let host = normalize_name(host);
    let domain = normalize_name(domain);
    let domain = domain.strip_prefix('.').unwrap_or(&domain);
    if domain.is_empty() || host.is_empty() {
        return false;
    }
    if host == domain {
        return true;
    }
    host.len() > domain.len()
        && host.ends_with(domain)
        && host.as_bytes()[host.len() - domain.len() - 1] == b'.'
}

/// True when `host` matches any of `domains` (see [`matches_domain`]).
pub fn matches_any(host: &str, domains: &[String]) -> bool {
    domains.iter().any(|d| matches_domain(host, d))
}

/// Syntax check for a configured domain: non-empty, ASCII letters, digits, `-` and `.`,
/// labels of 1..=63 characters. Rejecting anything else at load time means a typo shows
/// up as a startup error instead of a bot that silently never verifies.
pub fn is_valid_domain(domain: &str) -> bool {
    let d = normalize_name(domain);
    let d = d.strip_prefix('.').unwrap_or(&d);
    !d.is_empty()
        && d.len() <= 253
        && d.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_and_subdomain_match() {
        assert!(matches_domain("googlebot.com", "googlebot.com"));
        assert!(matches_domain(
            "crawl-1-2-3-4.googlebot.com",
            "googlebot.com"
        ));
        assert!(matches_domain("a.b.c.googlebot.com", "googlebot.com"));
    }

    #[test]
    fn look_alike_domains_do_not_match() {
        assert!(!matches_domain("evilgooglebot.com", "googlebot.com"));
        assert!(!matches_domain("crawl.evilgooglebot.com", "googlebot.com"));
        assert!(!matches_domain("googlebot.com.evil.net", "googlebot.com"));
        assert!(!matches_domain("googlebot.co", "googlebot.com"));
        assert!(!matches_domain("com", "googlebot.com"));
    }

    #[test]
    fn case_and_trailing_dot_are_ignored() {
        assert!(matches_domain("Crawl-1.GoogleBot.COM.", "googlebot.com"));
        assert!(matches_domain("crawl-1.googlebot.com", "GOOGLEBOT.com."));
        assert!(matches_domain("googlebot.com.", "googlebot.com"));
        assert!(matches_domain("x.googlebot.com", ".googlebot.com"));
    }

    #[test]
    fn empty_inputs_never_match() {
        assert!(!matches_domain("crawl.googlebot.com", ""));
        assert!(!matches_domain("crawl.googlebot.com", "."));
        assert!(!matches_domain("", "googlebot.com"));
        assert!(!matches_domain(".", "googlebot.com"));
    }

    #[test]
    fn matches_any_checks_every_domain() {
        let domains = vec!["googlebot.com".to_string(), "google.com".to_string()];
        assert!(matches_any("rate-limited-proxy-1.google.com", &domains));
        assert!(!matches_any("notgoogle.com", &domains));
    }

    #[test]
    fn domain_syntax() {
        assert!(is_valid_domain("crawl.amazonbot.amazon"));
        assert!(is_valid_domain("GoogleBot.com."));
        assert!(!is_valid_domain(""));
        assert!(!is_valid_domain("."));
        assert!(!is_valid_domain("a..b"));
        assert!(!is_valid_domain("has space.com"));
        assert!(!is_valid_domain("*.google.com"));
    }

    #[test]
    fn normalize() {
        assert_eq!(
            normalize_name(" Crawl.GoogleBot.com. "),
            "crawl.googlebot.com"
        );
        assert_eq!(normalize_name("."), "");
    }
}
