//! The README's catalog tables, rendered from the catalog, and the marker lines around each
//! generated block.

use super::Catalog;

impl Catalog {
    /// The README's catalog table: `| id | class | verify | User-Agent tokens |`, one row per
    /// bot in match order, at most six tokens shown (then `...`).
    pub fn markdown_bot_table(&self) -> String {
        let mut out =
            String::from("| id | class | verify | User-Agent tokens |\n|---|---|---|---|\n");
        for b in &self.bots {
            let mut tokens = code_list(b.ua_contains.iter().take(6));
            if b.ua_contains.len() > 6 {
                tokens.push_str(", ...");
            }
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                code(&b.id),
                b.class.as_str(),
                if b.verify { "yes" } else { "no" },
                tokens
            ));
        }
        out
    }

    /// The README's verification table: how each `verify: true` bot is checked,
    /// `| id | FCrDNS domains | published ranges | source |`, in match order; each range URL
    /// is a link named by its file name.
    pub fn markdown_verification_table(&self) -> String {
        let mut out = String::from(
            "| id | FCrDNS domains | published ranges | source |\n|---|---|---|---|\n",
        );
        for b in self.bots.iter().filter(|b| b.verify) {
            let source = self.source_of(b).map_or(String::new(), |s| {
                format!("[{}]({})", cell(&s.name), cell(&s.url))
            });
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                code(&b.id),
                code_list(b.fcrdns_domains.iter()),
                b.range_urls
                    .iter()
                    .map(|u| format!("[{}]({})", cell(url_file_name(u)), cell(u)))
                    .collect::<Vec<_>>()
                    .join(", "),
                source
            ));
        }
        out
    }
}

impl Catalog {
    /// The README's table of the human rule and the generic rules: every token of every list
    /// of [`HumanRule`](super::HumanRule), then every token of the generic bot markers
    /// (`generic_markers_id`) and `script` entries, then the declarations
    /// (`markers_in_platform_section`), `| rule | tokens |`.
    pub fn markdown_human_rule(&self) -> String {
        let h = &self.human;
        let mut out = String::from("| rule | tokens |\n|---|---|\n");
        let mut row = |rule: &str, tokens: &[String]| {
            out.push_str(&format!("| {rule} | {} |\n", code_list(tokens.iter())));
        };
        row(
            "browser forms: `human` wherever they occur",
            &h.browser_forms,
        );
        row(
            "device platforms: `human` in the platform section",
            &h.device_platforms,
        );
        row(
            "desktop platforms: `human` in the platform section, with a browser token",
            &h.desktop_platforms,
        );
        row("browser tokens (engines and products)", &h.browser_tokens);
        row(
            "the platform section is also looked for after",
            &h.platform_section_after,
        );
        let generic = format!(
            "generic bot markers (`{}`, other_bot), even in a browser-shaped UA (in a device's \
             platform section only the declarations below)",
            h.generic_markers_id
        );
        for (id, rule) in [
            (h.generic_markers_id.as_str(), generic.as_str()),
            (
                "script",
                "libraries, tools, headless and automation browsers (`script`)",
            ),
        ] {
            if let Some(b) = self.bots.iter().find(|b| b.id == id) {
                row(rule, &b.ua_contains);
            }
        }
        row(
            "declarations: generic markers that count in a device's platform section too",
            &h.markers_in_platform_section,
        );
        out
    }

    /// The README's generated blocks, `(name, block)`: each table between its two marker
    /// lines, `<!-- BEGIN <name>: generated from contract/catalog/bots.json -->` and
    /// `<!-- END <name> -->`.
    pub fn readme_blocks(&self) -> [(&'static str, String); 7] {
        let block = |name: &str, table: String| {
            format!("{}\n{table}{}", begin_marker(name), end_marker(name))
        };
        [
            ("bot table", block("bot table", self.markdown_bot_table())),
            (
                "verification table",
                block("verification table", self.markdown_verification_table()),
            ),
            (
                "human rule",
                block("human rule", self.markdown_human_rule()),
            ),
            (
                "browser checks",
                block("browser checks", self.markdown_browser_checks()),
            ),
            (
                "library TLS stacks",
                block(
                    "library TLS stacks",
                    self.markdown_library_tls_fingerprints(),
                ),
            ),
            (
                "datacenter networks",
                block("datacenter networks", self.markdown_datacenter_asns()),
            ),
            (
                "signed agents",
                block("signed agents", self.markdown_signed_agents()),
            ),
        ]
    }
}

/// The line that opens a generated README block.
pub fn begin_marker(name: &str) -> String {
    format!("<!-- BEGIN {name}: generated from contract/catalog/bots.json -->")
}

/// The line that closes a generated README block.
pub fn end_marker(name: &str) -> String {
    format!("<!-- END {name} -->")
}

/// `text` as a Markdown code span inside a table cell.
fn code(text: &str) -> String {
    let text = cell(text);
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

/// Code spans joined by `, `.
fn code_list<'a>(items: impl Iterator<Item = &'a String>) -> String {
    items.map(|s| code(s)).collect::<Vec<_>>().join(", ")
}

/// `text` safe inside a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The last path segment of a URL (the published file's name).
pub(super) fn url_file_name(u: &str) -> &str {
    u.rsplit('/').next().unwrap_or(u)
}

#[cfg(test)]
mod tests {
    use super::super::tests::builtin;

    #[test]
    fn tables_render_rows_in_match_order() {
        let c = builtin();
        let table = c.markdown_bot_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2 + 161);
        assert_eq!(
            lines[2],
            "| `googlebot-image` | search_crawler | yes | `googlebot-image` |"
        );
        assert!(lines.contains(&"| `sogou` | other_bot | no | `sogou web spider`, `sogou news spider`, `sogou pic spider`, `sogou video spider`, `sogou inst spider`, `sogou orion spider`, ... |"));
        let table = c.markdown_verification_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2 + 56);
        assert!(lines.contains(&"| `gptbot` |  | [gptbot.json](https://openai.com/gptbot.json) | [Overview of OpenAI Crawlers](https://platform.openai.com/docs/bots) |"));
        let table = c.markdown_human_rule();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2 + 8);
        assert!(lines[2].starts_with(
            "| browser forms: `human` wherever they occur | `profile/midp-`, `netfront`, "
        ));
        assert!(lines[7].starts_with("| generic bot markers (`declared-bot`, other_bot), even in a browser-shaped UA (in a device's platform section only the declarations below) | `bot/`, "));
        assert!(lines[8].ends_with("`wkhtmlto`, `ptst/` |"));
        assert_eq!(lines[9], "| declarations: generic markers that count in a device's platform section too | `bot/`, `crawl`, `spider/`, `scrap`, `http://`, `https://`, `www.`, `mailto:` |");
    }
}
