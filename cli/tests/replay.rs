//! `crawlguard replay`: the filter's own decisions on the repository's real access log, with
//! and without offline verification, in shadow mode (global and per limit), at other speeds;
//! the warning for verified crawlers; what a log cannot tell (cost headers, origin times for
//! shedding) said in the output; `--json`.

mod common;

use common::{APACHE_LOG, BIN};

use crawlguard_cli::input;
use crawlguard_cli::offline::Offline;
use crawlguard_cli::replay::Replay;
use crawlguard_core::config;
use serde_json::Value;
use std::process::Command;

const EXAMPLE_TOML: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../sidecar/sidecar.example.toml"
);

fn replay(cfg: &str, speed: f64, ranges: &[&str]) -> Value {
    let cfg = config::parse(cfg.as_bytes()).expect("valid config");
    let offline = if ranges.is_empty() {
        None
    } else {
        let args: Vec<String> = ranges.iter().map(|s| s.to_string()).collect();
        Some(Offline::load(&args).expect("ranges load"))
    };
    let mut rp = Replay::new(cfg, speed, offline);
    let inputs = input::each_input(&[APACHE_LOG.to_string()], None, &mut |r| rp.add(r));
    assert_eq!(inputs[0].parsed, 9_999);
    serde_json::to_value(rp.json(5)).expect("json")
}

fn class(j: &Value, name: &str) -> (u64, u64) {
    let (a, r, s) = class3(j, name);
    assert_eq!(s, 0, "{name}: shadow-limited");
    (a, r)
}

/// (admitted, rejected, shadow-limited) of a class.
fn class3(j: &Value, name: &str) -> (u64, u64, u64) {
    row3(j, "classes", "class", name)
}

fn limit(j: &Value, name: &str) -> (u64, u64) {
    let (a, r, s) = limit3(j, name);
    assert_eq!(s, 0, "{name}: shadow-limited");
    (a, r)
}

/// (admitted, rejected, shadow-limited) of a limit.
fn limit3(j: &Value, name: &str) -> (u64, u64, u64) {
    row3(j, "limits", "limit", name)
}

fn row3(j: &Value, list: &str, key: &str, name: &str) -> (u64, u64, u64) {
    let c = j[list]
        .as_array()
        .and_then(|a| a.iter().find(|c| c[key] == name))
        .unwrap_or(&Value::Null);
    (
        c["admitted"].as_u64().unwrap_or(0),
        c["rejected"].as_u64().unwrap_or(0),
        c["shadow_limited"].as_u64().unwrap_or(0),
    )
}

/// `crawlguard replay --config <json> <apache log>` as text.
fn replay_text(cfg: &str) -> String {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("cfg.json");
    std::fs::write(&p, cfg).expect("write");
    let out = Command::new(BIN)
        .args(["replay", "--config"])
        .arg(&p)
        .arg(APACHE_LOG)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn default_configuration_in_real_time_without_verification() {
    let j = replay("", 1.0, &[]);
    assert_eq!(j["requests"], 9_999);
    assert_eq!(class(&j, "human"), (7_037, 0));
    assert_eq!(class(&j, "unverified_bot"), (919, 220));
    assert_eq!(class(&j, "other_bot"), (1_368, 63));
    assert_eq!(class(&j, "script"), (149, 62));
    assert_eq!(class(&j, "search_crawler"), (0, 0));
    assert_eq!(j["exempt"], 181);
    assert_eq!(limit(&j, "unverified_bot_per_ip"), (919, 220));
    assert_eq!(limit(&j, "unverified_bot_global"), (919, 0));
    assert_eq!(limit(&j, "script_per_ip"), (149, 62));
    assert_eq!(limit(&j, "human_per_ip"), (7_037, 0));
    // The aggregate defaults: one /24 of other_bot clients takes more than its share.
    assert_eq!(limit(&j, "other_bot_per_ip"), (1_368, 55));
    assert_eq!(limit(&j, "other_bot_per_24"), (1_368, 8));
    assert_eq!(
        j["routes"],
        serde_json::json!([{"route": "default", "admitted": 9_473, "rejected": 345,
                            "shadow_limited": 0}])
    );
    assert_eq!(
        j["status_vs_prediction"][0],
        serde_json::json!({"actual": "2xx", "admitted": 8_747, "rejected_429": 243,
                           "rejected_503": 0, "shadow_limited": 0, "exempt": 180})
    );
    assert_eq!(j["cost_limits"], serde_json::json!([]));
    assert_eq!(j["shedding_not_replayed"], false);
    assert_eq!(j["fleet_as_one_envoy"], false);
    assert_eq!(
        j["top_limited_clients"][0],
        serde_json::json!({"client": "66.249.73.135", "rejected": 120, "class": "unverified_bot"})
    );
    assert!(j["verification"]
        .as_str()
        .unwrap_or("")
        .starts_with("none (no --ranges)"));
    assert!(j["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .all(|v| v["verdict"] == "unknown (no --ranges)"));
    assert_eq!(j["warnings"], serde_json::json!([]));
    assert_eq!(j["unresolved"], 0);
}

#[test]
fn sidecar_ranges_verify_googlebot() {
    let j = replay("", 1.0, &[EXAMPLE_TOML]);
    // Today's googlebot.json holds most of the 2015 Googlebot addresses.
    assert_eq!(class(&j, "search_crawler"), (524, 0));
    assert_eq!(class(&j, "unverified_bot"), (515, 100));
    assert_eq!(class(&j, "human"), (7_037, 0));
    let v: Vec<(String, String, u64)> = j["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter(|v| v["bot"] == "googlebot")
        .map(|v| {
            (
                v["bot"].as_str().unwrap_or("").into(),
                v["verdict"].as_str().unwrap_or("").into(),
                v["callouts"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        v,
        [
            ("googlebot".into(), "verified (ip range)".into(), 9),
            (
                "googlebot".into(),
                "unknown (needs FCrDNS, not done offline)".into(),
                3
            ),
        ]
    );
    // BOT=FILE: the same ranges without the TOML; a range-only bot's miss is spoofed.
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/google-crawler-ips/googlebot.json"
    );
    let j2 = replay("", 1.0, &[&format!("googlebot={file}")]);
    assert_eq!(class(&j2, "search_crawler"), (524, 0));
    let gptbot = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/openai-crawler-ips/gptbot.json"
    );
    let o = Offline::load(&[format!("gptbot={gptbot}")]).expect("load");
    assert_eq!(
        o.verdict("192.0.2.1".parse().expect("ip"), "gptbot")
            .contract()
            .as_str(),
        "spoofed"
    );
    assert!(Offline::load(&["googlebot=/nonexistent.json".to_string()]).is_err());
    // A bot id the catalog lacks (ids are lowercase) is refused, not replayed without ranges.
    let typo = Offline::load(&[format!("GPTBot={gptbot}")]).expect_err("unknown bot id");
    assert!(typo.starts_with("--ranges GPTBot="), "{typo}");
    assert!(typo.contains("no bot \"GPTBot\" in the catalog"), "{typo}");
    // The built-in gptbot's ranges are only URLs: never fetched offline, so unknown, and said
    // so apart from a bot with no method at all.
    let builtin = Offline::load(&[]).expect("load");
    let ip = "192.0.2.1".parse().expect("ip");
    assert_eq!(
        builtin.verdict(ip, "gptbot").label(),
        "unknown (ranges only from URLs, not fetched offline)"
    );
    assert_eq!(
        builtin.verdict(ip, "no-such-bot").label(),
        "unknown (no method)"
    );
}

#[test]
fn shadow_mode_forwards_everything_and_counts_what_it_would_reject() {
    let j = replay(r#"{"mode":"shadow"}"#, 1.0, &[]);
    assert_eq!(j["mode"], "shadow");
    // The buckets' verdicts; enforcing rejects 11 more unverified_bot requests (220): keys
    // that keep ignoring their Retry-After escalate, and in shadow mode no key is told one.
    assert_eq!(class3(&j, "unverified_bot"), (930, 0, 209));
    assert_eq!(class3(&j, "script"), (156, 0, 55));
    assert_eq!(class3(&j, "other_bot"), (1_368, 0, 63));
    assert_eq!(limit3(&j, "unverified_bot_per_ip"), (930, 0, 209));
    // The global limit comes after the per-ip one; it objected to none of them.
    assert_eq!(limit3(&j, "unverified_bot_global"), (1_139, 0, 0));
    assert_eq!(
        j["status_vs_prediction"][0],
        serde_json::json!({"actual": "2xx", "admitted": 8_758, "rejected_429": 0,
                           "rejected_503": 0, "shadow_limited": 232, "exempt": 180})
    );
    assert_eq!(
        j["top_limited_clients"][0],
        serde_json::json!({"client": "66.249.73.135", "rejected": 120, "class": "unverified_bot"})
    );
    let text = replay_text(r#"{"mode":"shadow"}"#);
    assert!(text.contains(
        "  mode shadow: limits in shadow mode reject nothing; \"shadow-limited\" below is \
         what the filter would count as shadow_limited (enforcing can reject more: escalation \
         applies to enforced limits only)\n"
    ));
    assert!(text.contains(
        "unverified_bot      1139       930         0        0.0%             209             18.3%\n"
    ));
}

#[test]
fn a_limit_in_shadow_mode_beside_enforced_ones() {
    let cfg = r#"{"limits":[
        {"name":"per_ip","class":"*","route":"*","rate_per_s":1,"burst":20,"key":"client_ip"},
        {"name":"trial","class":"*","route":"*","rate_per_s":0.5,"burst":10,"key":"client_ip","mode":"shadow"}
    ]}"#;
    let j = replay(cfg, 1.0, &[]);
    assert_eq!(j["mode"], "enforce");
    assert_eq!(limit3(&j, "per_ip"), (9_031, 787, 0));
    assert_eq!(limit3(&j, "trial"), (8_252, 0, 779));
    let sum = j["classes"]
        .as_array()
        .expect("classes")
        .iter()
        .fold((0, 0, 0), |(a, r, s), c| {
            (
                a + c["admitted"].as_u64().unwrap_or(0),
                r + c["rejected"].as_u64().unwrap_or(0),
                s + c["shadow_limited"].as_u64().unwrap_or(0),
            )
        });
    assert_eq!(sum, (8_252, 787, 779));
    let text = replay_text(cfg);
    assert!(text.contains(
        "  limits in shadow mode (trial) reject nothing; \"shadow-limited\" below is what they \
         would have rejected\n"
    ));
    assert!(text.contains(
        "per_ip        *      *      client_ip       1     20          -      9031       787  enforce               0\n"
    ));
    assert!(text.contains(
        "trial         *      *      client_ip     0.5     10          -      8252         0  shadow              779\n"
    ));
}

#[test]
fn what_a_log_cannot_tell_is_said() {
    // Cost-based limits: the cost is a response header, not in access logs; every request
    // is settled at its reservation (as the filter settles a missing header).
    let costs = r#"{"limits":[
        {"name":"items","class":"*","route":"*","rate_per_s":5,"burst":60,"key":"client_ip",
         "cost":{"reserve":3,"from_response_header":"x-crawlguard-cost"}}]}"#;
    let j = replay(costs, 1.0, &[]);
    assert_eq!(
        j["cost_limits"],
        serde_json::json!(["items (reserve 3, from x-crawlguard-cost)"])
    );
    // 60 tokens at 3 a request and 5/s: 20 requests of burst, one every 0.6 s after.
    assert_eq!(limit(&j, "items"), (9_066, 752));
    assert_eq!(j["limits"][0]["cost_reserve"], 3);
    // The Apache log carries no TLS, handshake or network fields: the browser checks
    // that read them passed, and the replay says so.
    assert_eq!(j["no_browser_signals"], 9_999);
    let text = replay_text(costs);
    assert!(text.contains(
        "  9999 requests were logged without tls, proto, ja4, asn, sfs and chua: the browser \
         checks that read them passed (log them as envoy/envoy-tls.yaml does to replay the \
         checks)\n"
    ));
    assert!(text.contains(
        "\nnotes\n  cost-based limits (items (reserve 3, from x-crawlguard-cost)) charge every \
         forwarded request its reserve: the actual cost is a response header, which access \
         logs do not carry, so each request is settled at its reservation (as the filter \
         settles a missing header)\n"
    ));
    // Shedding: needs the origin's response times under the replayed load.
    let shed = r#"{"shedding":{"enabled":true,"latency_ms":1}}"#;
    let j = replay(shed, 1.0, &[]);
    assert_eq!(j["shedding_not_replayed"], true);
    // Nothing is shed: the same decisions as without shedding.
    assert_eq!(class(&j, "unverified_bot"), (919, 220));
    assert_eq!(class(&j, "human"), (7_037, 0));
    let text = replay_text(shed);
    assert!(text.contains(
        "\nnotes\n  shedding is enabled but not replayed: it follows the origin's response \
         times under the load this configuration would let through, which a log of other \
         traffic cannot give; no request was shed\n"
    ));
    // Fleet mode: the whole log through one Envoy holding each limit whole (a replica
    // that never synced decides the same).
    let fleet = r#"{"fleet":{"enabled":true},"store":{"hash_seed":4242}}"#;
    let j = replay(fleet, 1.0, &[]);
    assert_eq!(j["fleet_as_one_envoy"], true);
    assert_eq!(class(&j, "unverified_bot"), (919, 220));
    assert_eq!(class(&j, "script"), (149, 62));
    let text = replay_text(fleet);
    assert!(text.contains(
        "\nnotes\n  fleet mode is on: every request is decided against the whole fleet-wide \
         limit, as by one Envoy (right for the fleet's combined traffic, e.g. a load \
         balancer's log; one replica's log would get only its share); the overshoot of sync \
         delays is not replayed\n"
    ));
}

#[test]
fn compressing_time_rejects_more() {
    let slow = replay("", 1.0, &[]);
    let fast = replay("", 3_600.0, &[]);
    assert!((fast["replayed_seconds"].as_f64().unwrap_or(0.0) - 298_856.0 / 3_600.0).abs() < 1e-6);
    for c in ["human", "unverified_bot", "other_bot", "script"] {
        let (a, r) = class(&fast, c);
        let (a1, r1) = class(&slow, c);
        assert_eq!(a + r, a1 + r1, "{c}");
        assert!(r >= r1, "{c}: {r} < {r1}");
    }
    assert!(class(&fast, "unverified_bot").1 > 209);
}

#[test]
fn verified_crawlers_over_one_percent_warn() {
    let cfg = r#"{"limits":[{"name":"tight","class":"search_crawler","route":"*","rate_per_s":0.001,"burst":20,"key":"client_ip"}]}"#;
    let j = replay(cfg, 1.0, &[EXAMPLE_TOML]);
    let (a, r) = class(&j, "search_crawler");
    assert_eq!(a + r, 524);
    assert!(r * 100 > a + r, "{a} {r}");
    let w = j["warnings"][0].as_str().unwrap_or("");
    assert!(
        w.starts_with("verified crawlers of class search_crawler would see "),
        "{w}"
    );
}

#[test]
fn binary_output_json_and_errors() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = dir.path().join("cfg.json");
    std::fs::write(&cfg, "{}").expect("write");
    let out = Command::new(BIN)
        .args(["replay", "--json", "--config"])
        .arg(&cfg)
        .arg(APACHE_LOG)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(j["schema"], "crawlguard.replay/v1");
    // The README's schema paragraph names every top-level key, and only those.
    let mut keys: Vec<&str> = j
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "schema")
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, readme_schema_keys("crawlguard.replay/v1"));
    assert_eq!(
        j["inputs"][0]["unparsable_examples"],
        serde_json::json!([8899])
    );
    // The table names the verification situation.
    let out = Command::new(BIN)
        .args(["replay", "--config"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../envoy/examples/api-route.json"
        ))
        .arg(APACHE_LOG)
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("verification: none (no --ranges): every crawler claim is unverified"));
    assert!(text.contains("limits keyed by a request header (api_per_key) see it missing"));
    // An invalid configuration: exit 1 with the filter's message.
    std::fs::write(&cfg, r#"{"mode":"off"}"#).expect("write");
    let out = Command::new(BIN)
        .args(["replay", "--config"])
        .arg(&cfg)
        .arg(APACHE_LOG)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("invalid configuration: mode: unknown variant `off`"));
}

/// The README's replay transcript is what the command prints: every line it shows (all but
/// the `$` command and `...` elisions) is a line of the real output, run from the
/// repository root with the README's own arguments.
#[test]
fn the_readme_replay_transcript_is_the_commands_output() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README");
    let start = "$ crawlguard replay --config envoy/crawlguard.default.json --speed 60 \\";
    let block: Vec<&str> = readme
        .lines()
        .skip_while(|l| *l != start)
        .skip(2)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    assert!(block.len() > 30, "README transcript not found");
    let out = Command::new(BIN)
        .current_dir(root)
        .args([
            "replay",
            "--config",
            "envoy/crawlguard.default.json",
            "--speed",
            "60",
            "--ranges",
            "sidecar/sidecar.example.toml",
            "../shared/data/elastic-apache-logs/apache_logs",
        ])
        .output()
        .expect("crawlguard runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let missing: Vec<&&str> = block
        .iter()
        .filter(|l| l.trim() != "..." && !lines.contains(&l.trim_end()))
        .collect();
    assert!(
        missing.is_empty(),
        "README lines the command does not print: {missing:#?}"
    );
}

/// crawlguard's access-log line for a curl request from `client` that started at second `s`
/// and took `duration` (`-`: not logged).
fn cg_line(s: u32, client: &str, duration: &str) -> String {
    format!(
        "[2026-12-01T07:00:{s:02}.000Z] {client} \"GET /slow\" 200 via_upstream class=script \
         retry_after=- duration_ms={duration} upstream_ms=- limit=- ua=\"curl/8.5.0\"\n"
    )
}

/// Replays `log` (crawlguard's format) through `cfg`; its JSON.
fn replay_lines(cfg: &str, log: &str) -> Value {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("access.log");
    std::fs::write(&p, log).expect("write");
    let cfg = config::parse(cfg.as_bytes()).expect("valid config");
    let mut rp = Replay::new(cfg, 1.0, None);
    input::each_input(&[p.display().to_string()], None, &mut |r| rp.add(r));
    serde_json::to_value(rp.json(5)).expect("json")
}

#[test]
fn requests_in_flight_are_replayed_from_each_lines_duration() {
    let cfg = r#"{"limits":[
        {"name":"two_at_once","class":"script","route":"*","max_in_flight":2,"key":"client_ip"}]}"#;
    // Six requests of one address start at 0 s, each 3 s long: two in flight, four refused;
    // another address has its own places; at 4 s the first two have ended: two of three
    // more fit.
    let mut log: String = (0..6).map(|_| cg_line(0, "192.0.2.1", "3000")).collect();
    log += &cg_line(1, "192.0.2.2", "3000");
    log += &cg_line(4, "192.0.2.1", "3000");
    log += &cg_line(4, "192.0.2.1", "3000");
    log += &cg_line(4, "192.0.2.1", "3000");
    let j = replay_lines(cfg, &log);
    assert_eq!(limit(&j, "two_at_once"), (5, 5));
    assert_eq!(j["limits"][0]["max_in_flight"], 2);
    assert_eq!(j["limits"][0]["rate_per_s"], Value::Null);
    assert_eq!(
        j["in_flight_limits"],
        serde_json::json!(["two_at_once (max_in_flight 2)"])
    );
    assert_eq!(j["forwarded_without_duration"], 0);
    // Without durations every request ends at once: nothing is refused, and it is said.
    let log: String = (0..6).map(|_| cg_line(0, "192.0.2.1", "-")).collect();
    let j = replay_lines(cfg, &log);
    assert_eq!(limit(&j, "two_at_once"), (6, 0));
    assert_eq!(j["forwarded_without_duration"], 6);
}

/// The top-level keys the README lists for the `--json` output of `schema`: the backquoted
/// names of its paragraph outside parentheses, sorted.
fn readme_schema_keys(schema: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let head = format!("`--json` (schema `{schema}`):");
    let at = readme.find(&head).expect("the README documents the schema") + head.len();
    let para = readme[at..].split("\n\n").next().unwrap_or_default();
    let (mut depth, mut inside, mut name, mut keys) = (0u32, false, String::new(), Vec::new());
    for ch in para.chars() {
        match ch {
            '(' if !inside => depth += 1,
            ')' if !inside => depth = depth.saturating_sub(1),
            '`' if inside => {
                inside = false;
                if depth == 0 {
                    keys.push(name.trim_end_matches("[]").to_string());
                }
                name.clear();
            }
            '`' => inside = true,
            c if inside => name.push(c),
            _ => {}
        }
    }
    keys.sort_unstable();
    keys
}

#[test]
fn a_logged_signal_the_configuration_does_not_read_is_said() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = dir.path().join("edge.log");
    let line = |ip: &str, ja4: &str, asn: &str| {
        format!(
            "[2026-12-03T21:20:24.617Z] {ip} \"GET /\" 200 via_upstream class=suspect_browser \
             retry_after=- duration_ms=2 upstream_ms=0 limit=- tls=TLSv1.3 proto=HTTP/1.1 \
             ja4={ja4} asn={asn} sfs=none chua=\" ua=\"Mozilla/5.0 (Windows NT 10.0; Win64; \
             x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36\"\n"
        )
    };
    let lines = [
        line("127.0.8.1", "t13i181000_85036bcba153_d41ae481755e", "16509"),
        line("127.0.8.2", "-", "16509"),
        line("127.0.8.3", "t13i181000_85036bcba153_d41ae481755e", "-"),
        line("127.0.8.4", "-", "-"),
    ];
    std::fs::write(&log, lines.concat()).expect("write");
    let run = |cfg: &str| -> Value {
        let p = dir.path().join("cfg.json");
        std::fs::write(&p, cfg).expect("write");
        let out = Command::new(BIN)
            .args(["replay", "--json", "--config"])
            .arg(&p)
            .arg(&log)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    // Neither header read: three lines carry one of them.
    assert_eq!(run("{}")["browser_signals_not_configured"], 3);
    // Only the ASN read: the two lines with a JA4 are left.
    let asn_only = r#"{"client_signals":{"asn_header":"x-crawlguard-asn"}}"#;
    assert_eq!(run(asn_only)["browser_signals_not_configured"], 2);
    let both =
        r#"{"client_signals":{"asn_header":"x-crawlguard-asn","ja4_header":"x-crawlguard-ja4"}}"#;
    let j = run(both);
    assert_eq!(j["browser_signals_not_configured"], 0);
    // Read, Python's handshake or the cloud network makes three suspect_browser; the line
    // with neither sent Sec-Fetch-Site and Sec-CH-UA: human.
    assert_eq!(class(&j, "suspect_browser"), (3, 0));
    assert_eq!(class(&j, "human"), (1, 0));
    assert_eq!(class(&run("{}"), "human"), (4, 0));
}
