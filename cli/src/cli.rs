//! The command line: `crawlguard report | replay | check-config | classify`.
//!
//! Exit status: 0 on success; 1 when a configuration is invalid (check-config, or the
//! `--config` of replay/report), an input cannot be read, (report/replay) an input ended
//! in an error, or (report) a `--fail-if` or `--baseline` threshold failed; 2 for usage
//! errors (a malformed `--fail-if`, an unreadable `--baseline`).

use crate::check;
use crate::input;
use crate::logfmt::Format;
use crate::offline::Offline;
use crate::replay::{self, Replay};
use crate::report::{self, Report};
use crate::table::TextTable;
use clap::{Parser, Subcommand};
use crawlguard_core::config::{self, Config};
use std::io::{BufRead, Write};
use std::path::PathBuf;

const AFTER: &str = "\
Examples:
  crawlguard report /var/log/envoy/access.log.1.gz /var/log/envoy/access.log
  crawlguard report --json --plot incident.svg access.log
  crawlguard report --fail-if 'search_crawler.rejected_share > 1%' --baseline yesterday.json access.log
  crawlguard replay --config new-limits.json --speed 10 access.log
  crawlguard replay --config cfg.json --ranges sidecar/sidecar.example.toml access.log
  crawlguard check-config envoy/examples/api-route.json envoy/istio/wasmplugin.yaml
  echo 'Mozilla/5.0 (compatible; Googlebot/2.1)' | crawlguard classify

Exit status: 0 ok, 1 invalid configuration, unreadable input or a failed report threshold,
2 usage error.";

/// crawlguard: report on access logs, replay a configuration against them offline with the
/// filter's own decision code, check configurations, classify User-Agents.
#[derive(Debug, Parser)]
#[command(name = "crawlguard", version, after_help = AFTER)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per class and bot id: requests, 2xx/429/503/5xx shares, TTFB P50/P95/P99, who
    /// rejected (crawlguard or upstream), top 5 minutes by 429s, top talkers.
    ///
    /// Reads LOGs (files, `-` or nothing for stdin; plain or gzip) in Envoy's default
    /// format, crawlguard's own access log format (envoy/envoy.yaml), Envoy JSON, or
    /// nginx/Apache combined (optionally followed by `$request_time
    /// $upstream_response_time`); the format is detected per file. Lines that parse in no
    /// format are counted and reported, never fatal. The class is the one crawlguard logged,
    /// else the filter's classifier on the User-Agent (crawler claims count as
    /// unverified_bot). TTFB is the nearest-rank percentile of the upstream time (lines
    /// without one are not counted), exact at the logs' 1 ms resolution.
    Report(ReportArgs),
    /// Replay LOGs through a configuration with the filter's own decision code (in-memory
    /// store, virtual clock from the log's timestamps) and show what it would have done.
    ///
    /// Per class / route / limit admitted vs rejected, actual status x predicted decision,
    /// the clients limited most, and a warning when a verified-crawler class would see more
    /// than 1% rejections. Crawler claims are verified offline from --ranges (the sidecar's
    /// TOML configuration and/or BOT=FILE range files); without it they stay unverified.
    Replay(ReplayArgs),
    /// Validate filter configurations exactly as the filter's on_configure does: a JSON
    /// document, an Istio WasmPlugin YAML (its pluginConfig) or an Envoy YAML with the wasm
    /// filter. Exit 1 with `field: reason` on the first error. What the filter would log as
    /// `configuration warning: ...` (valid, probably not meant) is printed one line each;
    /// warnings do not fail the check.
    CheckConfig(CheckArgs),
    /// Classify User-Agents (arguments, or one per line on stdin): class, bot id, and
    /// whether the claim needs verification.
    Classify(ClassifyArgs),
}

/// `report` options.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Access logs (plain or .gz); `-` or none: stdin.
    pub logs: Vec<String>,
    /// Log format (default: detected per file).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Print JSON (schema crawlguard.report/v1, see the README) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also draw the incident picture into FILE (.svg or .png): requests, crawlguard's
    /// rejections, and the 429s/5xx it did not answer, stacked by class, bins fit to the span.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// TrueType font for the plot's text (default: $CRAWLGUARD_FONT or a system font).
    #[arg(long, value_name = "TTF")]
    pub font: Option<PathBuf>,
    /// Top talkers to show.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Classify User-Agents with this configuration's bot catalog and map paths to its
    /// routes (JSON or WasmPlugin YAML; default: the embedded default configuration).
    #[arg(long, value_name = "CFG")]
    pub config: Option<PathBuf>,
    /// Exit status 1 when EXPR holds, e.g. 'search_crawler.rejected_share > 1%'
    /// (SUBJECT.METRIC OP VALUE; SUBJECT a class, bot:ID or route:NAME; METRIC requests,
    /// rejected_share, success_rate, share_429, share_503, share_5xx, ttfb_p50_ms,
    /// ttfb_p95_ms, ttfb_p99_ms; OP > >= < <=). Repeatable; a malformed EXPR: exit 2.
    #[arg(long = "fail-if", value_name = "EXPR", value_parser = report::gate::parse)]
    pub fail_if: Vec<report::gate::Threshold>,
    /// An earlier `report --json` output (e.g. yesterday's): exit status 1 when a class's
    /// requests or success rate (share of 2xx) moved by more than --max-change.
    #[arg(long, value_name = "FILE.json")]
    pub baseline: Option<PathBuf>,
    /// The most a class's requests or success rate may move from --baseline, either way,
    /// as a share of its baseline value: 30% or 0.3.
    #[arg(long, value_name = "SHARE", default_value = "30%", value_parser = report::gate::parse_max_change)]
    pub max_change: f64,
}

/// `replay` options.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Filter configuration: JSON, or an Istio WasmPlugin / Envoy YAML carrying one.
    #[arg(long, value_name = "CFG")]
    pub config: PathBuf,
    /// Access logs (plain or .gz); `-` or none: stdin.
    pub logs: Vec<String>,
    /// Time compression: N log seconds pass in one replayed second (1 = real time).
    #[arg(long, default_value_t = 1.0, value_name = "N")]
    pub speed: f64,
    /// Offline verification: the sidecar's TOML configuration (its [[bots]] range files)
    /// and/or BOT=FILE (a range file in the vendors' JSON format for bot id BOT).
    /// Repeatable. Without it every crawler claim is unverified.
    #[arg(long, value_name = "TOML|BOT=FILE")]
    pub ranges: Vec<String>,
    /// Log format (default: detected per file).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Print JSON (schema crawlguard.replay/v1, see the README) instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Clients to show.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

/// `check-config` options.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Files to check (`-` = stdin).
    #[arg(required = true)]
    pub files: Vec<String>,
}

/// `classify` options.
#[derive(Debug, clap::Args)]
pub struct ClassifyArgs {
    /// User-Agents; none: one per line on stdin.
    pub user_agents: Vec<String>,
    /// Use this configuration's bot catalog (default: the built-in one).
    #[arg(long, value_name = "CFG")]
    pub config: Option<PathBuf>,
    /// One JSON object per User-Agent instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command line of this process; returns the exit status.
pub fn main() -> i32 {
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let code = match cli.command {
        Command::Report(a) => report_cmd(&a, &mut out),
        Command::Replay(a) => replay_cmd(&a, &mut out),
        Command::CheckConfig(a) => check_cmd(&a, &mut out),
        Command::Classify(a) => classify_cmd(&a, &mut out),
    };
    let _ = out.flush();
    code
}

fn read_input(path: &str) -> Result<Vec<u8>, String> {
    if path == "-" {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut v)
            .map_err(|e| format!("stdin: {e}"))?;
        Ok(v)
    } else {
        std::fs::read(path).map_err(|e| format!("{path}: {e}"))
    }
}

/// Loads the one configuration in `path` (JSON, WasmPlugin or Envoy YAML).
pub fn load_config(path: &std::path::Path) -> Result<Config, String> {
    let name = path.display().to_string();
    let bytes = read_input(&name)?;
    let mut found = check::check(&bytes).map_err(|e| format!("{name}: {e}"))?;
    if found.len() != 1 {
        return Err(format!(
            "{name}: {} configurations found; give a file with exactly one",
            found.len()
        ));
    }
    let c = found.remove(0);
    c.result
        .map_err(|e| format!("{name}: {}: invalid configuration: {e}", c.what))
}

/// `--config`, or the embedded default configuration.
fn config_or_default(cfg: Option<&PathBuf>) -> Result<Config, String> {
    match cfg {
        Some(p) => load_config(p),
        None => config::parse(b"").map_err(|e| format!("embedded default configuration: {e}")),
    }
}

fn report_cmd(a: &ReportArgs, out: &mut dyn Write) -> i32 {
    let cfg = match config_or_default(a.config.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("crawlguard report: {e}");
            return 1;
        }
    };
    if let Some(e) = report::gate::unknown_subject(&a.fail_if, &cfg) {
        eprintln!("crawlguard report: {e}");
        return 2;
    }
    let baseline = match a
        .baseline
        .as_ref()
        .map(|p| report::baseline::read(p))
        .transpose()
    {
        Ok(b) => b,
        Err(e) => {
            eprintln!("crawlguard report: --baseline {e}");
            return 2;
        }
    };
    let mut rep = Report::new(cfg);
    rep.inputs = input::each_input(&a.logs, a.format, &mut |r| rep.add(r));
    let j = rep.json(a.top);
    let mut doc = serde_json::to_value(&j).unwrap_or_default();
    let mut checks = report::gate::check(&doc, &a.fail_if);
    if let Some(b) = &baseline {
        checks.extend(report::gate::compare(&doc, b, a.max_change));
    }
    let text = if a.json {
        if !checks.is_empty() {
            doc["checks"] = serde_json::to_value(&checks).unwrap_or_default();
        }
        serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
    } else if checks.is_empty() {
        report::render(&j)
    } else {
        report::render(&j) + &report::gate::render(&checks)
    };
    let mut code = 0;
    if out.write_all(text.as_bytes()).is_err() {
        return 1;
    }
    for c in checks.iter().filter(|c| c.failed) {
        eprintln!("crawlguard report: FAILED {}: {}", c.check, c.found);
        code = 1;
    }
    if let Some(p) = &a.plot {
        match crate::plot::plot(p, &rep.timeline, a.font.as_deref()) {
            Ok(note) => {
                if let Some(n) = note {
                    eprintln!("crawlguard report: {n}");
                }
                if !a.json {
                    let _ = writeln!(out, "\nplot written to {}", p.display());
                }
            }
            Err(e) => {
                eprintln!("crawlguard report: plot: {e}");
                code = 1;
            }
        }
    }
    input_errors("report", &rep.inputs).max(code)
}

/// Reports inputs that ended in an error on stderr; 1 if any did.
fn input_errors(cmd: &str, inputs: &[input::FileStats]) -> i32 {
    let mut code = 0;
    for f in inputs {
        if let Some(e) = &f.error {
            eprintln!(
                "crawlguard {cmd}: {}: {e} ({} lines read before it are included)",
                f.name, f.lines
            );
            code = 1;
        }
        if f.lines > 0 && f.parsed == 0 {
            eprintln!(
                "crawlguard {cmd}: {}: no line parsed as {}",
                f.name,
                f.format.map_or("any known format", |f| f.as_str())
            );
        }
    }
    code
}

fn replay_cmd(a: &ReplayArgs, out: &mut dyn Write) -> i32 {
    let cfg = match load_config(&a.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("crawlguard replay: {e}");
            return 1;
        }
    };
    if !(a.speed.is_finite() && a.speed > 0.0) {
        eprintln!("crawlguard replay: --speed must be a positive number");
        return 2;
    }
    let offline = if a.ranges.is_empty() {
        None
    } else {
        match Offline::load(&a.ranges) {
            Ok(o) => Some(o),
            Err(e) => {
                eprintln!("crawlguard replay: {e}");
                return 1;
            }
        }
    };
    let summary = check::summary(&cfg);
    let mut rp = Replay::new(cfg, a.speed, offline);
    let inputs = input::each_input(&a.logs, a.format, &mut |r| rp.add(r));
    let j = rp.json(a.top);
    let text = if a.json {
        let mut v = serde_json::to_value(&j).unwrap_or_default();
        if let Some(m) = v.as_object_mut() {
            m.insert(
                "inputs".into(),
                serde_json::to_value(&inputs).unwrap_or_default(),
            );
        }
        serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
    } else {
        let mut s = replay::render(&j, &a.config.display().to_string(), &summary);
        for f in &inputs {
            s += &format!(
                "  input {}: {}, {} lines, {} replayed, {} unparsable{}\n",
                f.name,
                f.format.map_or("no format recognised", |f| f.as_str()),
                f.lines,
                f.parsed,
                f.unparsable,
                if f.unparsable_examples.is_empty() {
                    String::new()
                } else {
                    let ex: Vec<String> =
                        f.unparsable_examples.iter().map(u64::to_string).collect();
                    format!(" (line {})", ex.join(", "))
                }
            );
        }
        s
    };
    if out.write_all(text.as_bytes()).is_err() {
        return 1;
    }
    input_errors("replay", &inputs)
}

fn check_cmd(a: &CheckArgs, out: &mut dyn Write) -> i32 {
    let mut code = 0;
    for f in &a.files {
        let bytes = match read_input(f) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("{e}");
                code = 1;
                continue;
            }
        };
        match check::check(&bytes) {
            Err(e) => {
                eprintln!("{f}: {e}");
                code = 1;
            }
            Ok(found) => {
                for c in found {
                    match c.result {
                        Ok(cfg) => {
                            let _ = writeln!(out, "{f}: {}: ok ({})", c.what, check::summary(&cfg));
                            // Valid but probably not meant: the lines on_configure logs at
                            // warn level. They do not fail the check.
                            for w in &cfg.warnings {
                                let _ =
                                    writeln!(out, "{f}: {}: configuration warning: {w}", c.what);
                            }
                        }
                        Err(e) => {
                            // The same `field: reason` the filter logs at on_configure.
                            eprintln!("{f}: {}: invalid configuration: {e}", c.what);
                            code = 1;
                        }
                    }
                }
            }
        }
    }
    code
}

fn classify_cmd(a: &ClassifyArgs, out: &mut dyn Write) -> i32 {
    let cl = match config_or_default(a.config.as_ref()) {
        Ok(c) => c.classifier,
        Err(e) => {
            eprintln!("crawlguard classify: {e}");
            return 1;
        }
    };
    let mut uas: Vec<Vec<u8>> = a
        .user_agents
        .iter()
        .map(|u| u.as_bytes().to_vec())
        .collect();
    if uas.is_empty() {
        let stdin = std::io::stdin();
        for line in stdin.lock().split(b'\n') {
            match line {
                Ok(mut l) => {
                    if l.last() == Some(&b'\r') {
                        l.pop();
                    }
                    uas.push(l);
                }
                Err(e) => {
                    eprintln!("crawlguard classify: stdin: {e}");
                    return 1;
                }
            }
        }
    }
    let mut t = TextTable::new(["class", "bot", "verification", "user-agent"]);
    for ua in &uas {
        let c = cl.classify(Some(ua));
        let (bot, verify) = match c.bot {
            Some(b) if b.verify => (
                b.id.as_str(),
                format!(
                    "yes: {} once verified, else unverified_bot/spoofed",
                    b.class.as_str()
                ),
            ),
            Some(b) => (b.id.as_str(), "no".to_string()),
            None => ("-", "no".to_string()),
        };
        let ua_text = String::from_utf8_lossy(ua);
        if a.json {
            let j = serde_json::json!({
                "user_agent": ua_text,
                "class": c.class.as_str(),
                "bot": c.bot.map(|b| b.id.as_str()),
                "claimed_class": c.bot.map(|b| b.class.as_str()),
                "verify": c.bot.is_some_and(|b| b.verify),
            });
            let _ = writeln!(out, "{j}");
        } else {
            t.row(vec![
                c.class.as_str().to_string(),
                bot.to_string(),
                verify,
                ua_text.into_owned(),
            ]);
        }
    }
    if !a.json {
        let _ = out.write_all(t.render().as_bytes());
    }
    0
}
