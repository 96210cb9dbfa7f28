//! The main listener served over LDS from a file Envoy watches ([`EnvoyOpts::lds`]): the
//! rendered configuration split into a bootstrap and a listener resource.

use super::template::{json_str, render, Ports};
use super::EnvoyOpts;
use crate::filter_config::FilterConfig;

/// Splits a rendered configuration into (the configuration without the listener `main`, an
/// LDS resource file holding that listener). The listener runs from its `  - name: main`
/// line to the next line indented by at most two spaces that is not a comment.
pub(crate) fn split_main_listener(yaml: &str) -> (String, String) {
    const START: &str = "\n  - name: main\n";
    let start = yaml
        .find(START)
        .map(|i| i + 1)
        .expect("the rendered configuration has a listener `main`");
    let (head, rest) = yaml.split_at(start);
    let mut end = rest.len();
    let mut offset = 0;
    for (i, line) in rest.split_inclusive('\n').enumerate() {
        let text = line.trim();
        let indent = line.len() - line.trim_start_matches(' ').len();
        if i > 0 && !text.is_empty() && !text.starts_with('#') && indent <= 2 {
            end = offset;
            break;
        }
        offset += line.len();
    }
    let (block, tail) = rest.split_at(end);
    let mut listener = String::from("resources:\n");
    for (i, line) in block.lines().enumerate() {
        let line = line.strip_prefix("  ").unwrap_or(line);
        if i == 0 {
            listener += "- \"@type\": type.googleapis.com/envoy.config.listener.v3.Listener\n";
            listener += "  ";
            listener += line.trim_start_matches("- ");
        } else {
            listener += line;
        }
        listener.push('\n');
    }
    let mut bootstrap = format!("{head}{tail}");
    if !bootstrap.ends_with('\n') {
        bootstrap.push('\n');
    }
    (bootstrap, listener)
}

/// The main listener served over LDS from a watched file (see [`EnvoyOpts::lds`]).
pub(crate) struct LdsFile {
    /// The directory Envoy watches; it holds `listeners.yaml`.
    pub dir: std::path::PathBuf,
    pub opts: EnvoyOpts,
    pub ports: Ports,
    pub wasm: std::path::PathBuf,
}

impl LdsFile {
    /// Renders the configuration with `cfg` as the filter configuration, writes its main
    /// listener to `listeners.yaml` atomically (written next to the directory, then renamed
    /// into it: the move is what Envoy's directory watch reacts to) and returns the rest,
    /// with a `node` and `dynamic_resources` pointing at that file, as the bootstrap.
    pub fn write(&self, cfg: &FilterConfig) -> String {
        let opts = EnvoyOpts {
            filter_config: cfg.clone(),
            ..self.opts.clone()
        };
        let (bootstrap, listener) = split_main_listener(&render(self.ports, &self.wasm, &opts));
        let path = self.dir.join("listeners.yaml");
        let tmp = self.dir.with_extension("tmp");
        std::fs::write(&tmp, listener).expect("write LDS file");
        std::fs::rename(&tmp, &path).expect("move LDS file into place");
        // LDS needs a node identity (a file has no control plane to tell it apart from).
        format!(
            concat!(
                "node: {{ id: crawlguard-test, cluster: crawlguard-test }}\n",
                "{}dynamic_resources:\n",
                "  lds_config:\n",
                "    resource_api_version: V3\n",
                "    path_config_source:\n",
                "      path: {}\n",
                "      watched_directory: {{ path: {} }}\n",
            ),
            bootstrap,
            json_str(&path.display().to_string()),
            json_str(&self.dir.display().to_string())
        )
    }
}
