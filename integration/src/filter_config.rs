//! The crawlguard filter configuration a test hands to Envoy: [`FilterConfig`], and
//! [`Limit`] for the entries of its `limits`.

use serde::Serialize;

/// The filter's `configuration` as the test wants to hand it to Envoy.
#[derive(Debug, Clone)]
pub enum FilterConfig {
    /// A JSON document, serialised compactly.
    Json(serde_json::Value),
    /// Any string, passed verbatim (empty = the embedded default; may be invalid JSON).
    Raw(String),
}

impl FilterConfig {
    /// The string Envoy passes to `on_configure`.
    pub fn as_string(&self) -> String {
        match self {
            FilterConfig::Json(v) => v.to_string(),
            FilterConfig::Raw(s) => s.clone(),
        }
    }
}

impl Default for FilterConfig {
    fn default() -> Self {
        FilterConfig::Raw(String::new())
    }
}

impl From<serde_json::Value> for FilterConfig {
    fn from(v: serde_json::Value) -> Self {
        FilterConfig::Json(v)
    }
}

impl From<&str> for FilterConfig {
    fn from(s: &str) -> Self {
        FilterConfig::Raw(s.to_string())
    }
}

/// A refill rate so slow that nothing refills while a test runs (one token in 1000 s):
/// counts stay exact.
pub const NO_REFILL_PER_S: f64 = 0.001;

/// One entry of the filter's `limits`; serialises to its JSON, so it goes straight into
/// `json!`: `json!({"limits": [Limit::per_ip("all", 2)]})`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limit {
    /// `name` (named in the filter's debug line for a rejection).
    pub name: String,
    /// `class` (`*` = every class).
    pub class: String,
    /// `route` (`*` = every route).
    pub route: String,
    /// `rate_per_s`.
    pub rate_per_s: f64,
    /// `burst`.
    pub burst: u32,
    /// `key`: `client_ip`, `global` or `header:<name>`.
    pub key: String,
}

impl Limit {
    /// `burst` tokens per client IP for every class on every route, refilled at
    /// [`NO_REFILL_PER_S`].
    pub fn per_ip(name: &str, burst: u32) -> Limit {
        Limit {
            name: name.to_string(),
            class: "*".to_string(),
            route: "*".to_string(),
            rate_per_s: NO_REFILL_PER_S,
            burst,
            key: "client_ip".to_string(),
        }
    }

    /// `burst` tokens per client IP for `class` on every route, refilled at
    /// [`NO_REFILL_PER_S`], named `<class>_per_ip`.
    pub fn class_per_ip(class: &str, burst: u32) -> Limit {
        Limit::per_ip(&format!("{class}_per_ip"), burst).class(class)
    }

    /// `burst` tokens shared by every client (`key: global`) for every class on every
    /// route, refilled at [`NO_REFILL_PER_S`].
    pub fn global(name: &str, burst: u32) -> Limit {
        Limit::per_ip(name, burst).key("global")
    }

    /// Only for requests of this class.
    pub fn class(mut self, class: &str) -> Limit {
        self.class = class.to_string();
        self
    }

    /// Only for requests on this route.
    pub fn route(mut self, route: &str) -> Limit {
        self.route = route.to_string();
        self
    }

    /// Refilled at this rate instead.
    pub fn rate_per_s(mut self, rate_per_s: f64) -> Limit {
        self.rate_per_s = rate_per_s;
        self
    }

    /// Keyed by this instead of the client IP (`global`, `header:<name>`).
    pub fn key(mut self, key: &str) -> Limit {
        self.key = key.to_string();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::Limit;
    use serde_json::json;

    #[test]
    fn limit_serialises_to_the_filter_json() {
        assert_eq!(
            json!(Limit::per_ip("all", 2)),
            json!({"name": "all", "class": "*", "route": "*", "rate_per_s": 0.001, "burst": 2,
                   "key": "client_ip"})
        );
        assert_eq!(
            json!(Limit::class_per_ip("spoofed", 1)
                .route("api")
                .rate_per_s(0.01)
                .key("header:x-api-key")),
            json!({"name": "spoofed_per_ip", "class": "spoofed", "route": "api",
                   "rate_per_s": 0.01, "burst": 1, "key": "header:x-api-key"})
        );
    }
}
