//! `crawlguard classify`: class, bot id and verification, from arguments or stdin.

mod common;

use common::{BIN, GOOGLEBOT_UA};

use std::io::Write;
use std::process::{Command, Stdio};

#[test]
fn arguments_as_a_table() {
    let out = Command::new(BIN)
        .args([
            "classify",
            GOOGLEBOT_UA,
            "curl/8.5.0",
            "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0",
            "MojeekBot/0.11",
        ])
        .output()
        .expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(rows[0], ["class", "bot", "verification", "user-agent"]);
    assert_eq!(
        rows[1],
        [
            "unverified_bot",
            "googlebot",
            "yes: search_crawler once verified, else unverified_bot/spoofed",
            GOOGLEBOT_UA
        ]
    );
    assert_eq!(rows[2][..3], ["script", "script", "no"]);
    assert_eq!(rows[3][..3], ["human", "-", "no"]);
    assert_eq!(rows[4][..3], ["other_bot", "mojeekbot", "no"]);
}

#[test]
fn stdin_as_json_lines() {
    let mut child = Command::new(BIN)
        .args(["classify", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(format!("{GOOGLEBOT_UA}\r\n\nGPTBot/1.2\n").as_bytes())
        .expect("feed");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(rows.len(), 3);
    assert_eq!(
        rows[0],
        serde_json::json!({"user_agent": GOOGLEBOT_UA, "class": "unverified_bot", "bot": "googlebot",
                           "claimed_class": "search_crawler", "verify": true})
    );
    // An empty User-Agent is a script, as in the filter.
    assert_eq!(rows[1]["class"], "script");
    assert_eq!(rows[1]["bot"], serde_json::Value::Null);
    assert_eq!(
        (&rows[2]["bot"], &rows[2]["claimed_class"]),
        (&"gptbot".into(), &"ai_trainer".into())
    );
}
