//! The fake verifier: [`FakeVerdict`], one fixed answer, and the Envoy listener that answers
//! the listed claims with them.

use super::template::json_str;
use crawlguard_contract::verify::{Answer, Method, Verdict};

/// One fixed answer of the fake verifier (see [`EnvoyOpts::fake_verifier`](super::EnvoyOpts::fake_verifier)).
#[derive(Debug, Clone)]
pub struct FakeVerdict {
    /// The client IP of the claim, as the filter prints it in `ip=`.
    pub ip: String,
    /// The bot id of the claim (`bot=`).
    pub bot: String,
    /// `verified`, `spoofed` or `unknown`.
    pub verdict: String,
    /// The `method` to send instead of the usual one: a value a newer sidecar might send
    /// (`None`: `fcrdns`, or `none` for `unknown`).
    pub method: Option<String>,
}

impl FakeVerdict {
    /// The JSON body the fake verifier answers with: the contract's [`Answer`] (crate
    /// `crawlguard-contract`, the type the sidecar serialises and the filter parses), `method`
    /// `fcrdns` (`none` for `unknown`), `host` `crawl-<ip with dashes>.<bot>.com` for
    /// `verified` (empty otherwise), `ttl_s` 3600. A `verdict` other than `verified`,
    /// `spoofed` or `unknown` gives a body that is not an answer (a verifier error for the
    /// filter).
    pub fn body(&self) -> String {
        let Some(verdict) = Verdict::parse(&self.verdict) else {
            return format!("not a verdict: {}", self.verdict);
        };
        let host = if verdict == Verdict::Verified {
            format!(
                "crawl-{}.{}.com",
                self.ip.replace(['.', ':'], "-"),
                self.bot
            )
        } else {
            String::new()
        };
        let method = if verdict == Verdict::Unknown {
            Method::None
        } else {
            Method::Fcrdns
        };
        let answer = Answer {
            ip: self.ip.clone(),
            bot: self.bot.clone(),
            verdict,
            method,
            host,
            ttl_s: 3600,
        };
        match &self.method {
            None => answer.to_json(),
            Some(m) => {
                let mut v = serde_json::to_value(&answer).unwrap_or_default();
                v["method"] = serde_json::Value::String(m.clone());
                v.to_string()
            }
        }
    }

    /// The same answer with `method` spelled `method` (e.g. one this filter does not know).
    pub fn with_method(mut self, method: &str) -> Self {
        self.method = Some(method.to_string());
        self
    }
}

impl<I: ToString, B: Into<String>, V: Into<String>> From<(I, B, V)> for FakeVerdict {
    fn from((ip, bot, verdict): (I, B, V)) -> Self {
        FakeVerdict {
            ip: ip.to_string(),
            bot: bot.into(),
            verdict: verdict.into(),
            method: None,
        }
    }
}

/// The fake verifier: a listener whose routes answer the listed claims with fixed verdicts.
pub(super) fn verifier_listener(port: u16, verdicts: &[FakeVerdict]) -> String {
    let mut routes = String::new();
    for v in verdicts {
        routes += &format!(
            concat!(
                "              - match:\n",
                "                  path: /v1/verify\n",
                "                  query_parameters:\n",
                "                  - name: ip\n",
                "                    string_match: {{ exact: {ip} }}\n",
                "                  - name: bot\n",
                "                    string_match: {{ exact: {bot} }}\n",
                "                direct_response:\n",
                "                  status: 200\n",
                "                  body: {{ inline_string: {body} }}\n",
                "                response_headers_to_add:\n",
                "                - header: {{ key: content-type, value: application/json }}\n",
                "                  append_action: OVERWRITE_IF_EXISTS_OR_ADD\n",
            ),
            ip = json_str(&v.ip),
            bot = json_str(&v.bot),
            body = json_str(&v.body()),
        );
    }
    format!(
        concat!(
            "  - name: fake_verifier\n",
            "    address:\n",
            "      socket_address: {{ address: 127.0.0.1, port_value: {port} }}\n",
            "    filter_chains:\n",
            "    - filters:\n",
            "      - name: envoy.filters.network.http_connection_manager\n",
            "        typed_config:\n",
            "          \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n",
            "          stat_prefix: fake_verifier\n",
            "          route_config:\n",
            "            name: fake_verifier\n",
            "            virtual_hosts:\n",
            "            - name: all\n",
            "              domains: [\"*\"]\n",
            "              routes:\n",
            "{routes}",
            "              - match: {{ prefix: \"/\" }}\n",
            "                direct_response: {{ status: 404 }}\n",
            "          http_filters:\n",
            "          - name: envoy.filters.http.router\n",
            "            typed_config:\n",
            "              \"@type\": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n",
        ),
        port = port,
        routes = routes
    )
}

#[cfg(test)]
mod tests {
    use super::FakeVerdict;

    #[test]
    fn fake_verdict_body_follows_the_verifier_contract() {
        let v = FakeVerdict::from(("127.0.0.7", "googlebot", "verified"));
        assert_eq!(
            v.body(),
            r#"{"ip":"127.0.0.7","bot":"googlebot","verdict":"verified","method":"fcrdns","host":"crawl-127-0-0-7.googlebot.com","ttl_s":3600}"#
        );
        let v = FakeVerdict::from(("127.0.0.8", "gptbot", "spoofed"));
        assert_eq!(
            v.body(),
            r#"{"ip":"127.0.0.8","bot":"gptbot","verdict":"spoofed","method":"fcrdns","host":"","ttl_s":3600}"#
        );
    }
}
