//! `crawlguard report --fail-if / --baseline / --max-change`: the exit status a cron job
//! reads (0 ok, 1 a threshold failed, 2 a malformed expression or baseline), and the
//! messages that name the failed threshold, on the Envoy access log of
//! `cli/tests/data/envoy-crawlguard.log` (30 `human` requests, all 2xx; 10 `unverified_bot`
//! requests, all rejected by crawlguard with 429).

mod common;

use common::{write_tmp, BIN};
use serde_json::Value;
use std::process::Command;

const LOG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/envoy-crawlguard.log"
);

/// Runs `crawlguard report ARGS LOG`: exit status, stdout, stderr.
fn report(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("report")
        .args(args)
        .arg(LOG)
        .output()
        .expect("run crawlguard");
    (
        out.status.code().expect("exit status"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_failed_threshold_sets_exit_status_1_and_is_named() {
    let (code, out, err) = report(&[
        "--fail-if",
        "unverified_bot.rejected_share > 50%",
        "--fail-if",
        "human.success_rate < 99%",
        "--fail-if",
        "search_crawler.rejected_share > 1%",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.ends_with(
            "\nthresholds (FAILED sets exit status 1)\n\
             FAILED  unverified_bot.rejected_share > 50%: 100.00% (10 requests)\n\
             ok      human.success_rate < 99%: 100.00% (30 requests)\n\
             ok      search_crawler.rejected_share > 1%: no requests\n"
        ),
        "{out}"
    );
    assert_eq!(
        err,
        "crawlguard report: FAILED unverified_bot.rejected_share > 50%: 100.00% (10 requests)\n"
    );
}

#[test]
fn thresholds_that_hold_leave_exit_status_0_and_json_carries_the_checks() {
    let (code, out, err) = report(&[
        "--json",
        "--fail-if",
        "unverified_bot.rejected_share > 100%",
        "--fail-if",
        "human.requests < 30",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(err, "");
    let j: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(
        j["checks"],
        serde_json::json!([
            {"check": "unverified_bot.rejected_share > 100%", "failed": false,
             "found": "100.00% (10 requests)"},
            {"check": "human.requests < 30", "failed": false, "found": "30 requests"}
        ])
    );
    // Without thresholds the document has no `checks`.
    let (code, out, _) = report(&["--json"]);
    assert_eq!(code, 0);
    let j: Value = serde_json::from_str(&out).expect("json");
    assert!(j.get("checks").is_none());
}

#[test]
fn malformed_expressions_are_refused_with_exit_status_2() {
    for (expr, why) in [
        ("search_crawler.rejected_share = 1%", "no comparison"),
        ("crawlers.rejected_share > 1%", "unknown class \"crawlers\""),
        ("human.rejected > 1%", "unknown metric \"rejected\""),
        ("human.rejected_share > 5", "a share is at most 100%"),
    ] {
        let (code, out, err) = report(&["--fail-if", expr]);
        assert_eq!(code, 2, "{expr}: {err}");
        assert_eq!(out, "", "{expr}: nothing is reported");
        assert!(err.contains(why), "{expr}: {err}");
        assert!(err.contains("grammar: SUBJECT.METRIC OP VALUE"), "{err}");
    }
    let (code, _, err) = report(&["--max-change", "150%"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a share is at most 100%"), "{err}");
}

#[test]
fn a_bot_or_route_the_configuration_does_not_know_is_refused_with_exit_status_2() {
    // A typo would otherwise pass every night as "no requests".
    let (code, out, err) = report(&["--fail-if", "bot:googelbot.rejected_share > 1%"]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.starts_with(
            "crawlguard report: --fail-if \"bot:googelbot.rejected_share > 1%\": unknown bot id \"googelbot\""
        ),
        "{err}"
    );
    let (code, out, err) = report(&["--fail-if", "route:api.share_429 > 1%"]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains(
            "unknown route \"api\" (routes: default; give the configuration's with --config)"
        ),
        "{err}"
    );
    // Known ones pass: a catalog bot, the non-browser id, the default route.
    for expr in [
        "bot:googlebot.requests > 1000",
        "bot:non-browser.requests > 1000",
        "route:default.share_5xx > 50%",
    ] {
        let (code, out, err) = report(&["--fail-if", expr]);
        assert_eq!(code, 0, "{expr}: {out}{err}");
    }
}

#[test]
fn a_baseline_flags_classes_that_moved_more_than_max_change() {
    let dir = tempfile::tempdir().expect("tmp");
    let (code, today, _) = report(&["--json"]);
    assert_eq!(code, 0);
    // The same day: nothing moved.
    let same = write_tmp(&dir, "same.json", &today);
    let (code, out, err) = report(&["--baseline", &same]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("ok      baseline: human traffic moves at most 30.00%: 30 -> 30 (+0.0%)\n"),
        "{out}"
    );
    // Yesterday had 50 humans, 80% of them 2xx: today's 30 is -40% (fails at 30%, passes
    // at 50%); the success rate rose by 25% (passes at 30%).
    let mut y: Value = serde_json::from_str(&today).expect("json");
    let human = y["classes"]
        .as_array_mut()
        .and_then(|a| a.iter_mut().find(|c| c["class"] == "human"))
        .expect("human");
    human["requests"] = 50.into();
    human["share"]["2xx"] = 0.8.into();
    let yesterday = write_tmp(&dir, "yesterday.json", &y.to_string());
    let (code, out, err) = report(&["--baseline", &yesterday]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("FAILED  baseline: human traffic moves at most 30.00%: 50 -> 30 (-40.0%)\n"),
        "{out}"
    );
    assert!(out.contains("ok      baseline: human success_rate moves at most 30.00%: 80.00% -> 100.00% (+25.0%)\n"), "{out}");
    assert_eq!(
        err,
        "crawlguard report: FAILED baseline: human traffic moves at most 30.00%: 50 -> 30 (-40.0%)\n"
    );
    let (code, out, err) = report(&["--baseline", &yesterday, "--max-change", "50%"]);
    assert_eq!(code, 0, "{out}{err}");
    // Not a report document, or no file: exit 2 before reading the log.
    let bad = write_tmp(&dir, "bad.json", "{\"schema\": \"crawlguard.replay/v1\"}");
    let (code, out, err) = report(&["--baseline", &bad]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains("not a `crawlguard report --json` document"),
        "{err}"
    );
    // A report shape with nothing to compare, or with nonsense in it: refused, not a pass.
    for (doc, why) in [
        (
            r#"{"schema":"crawlguard.report/v1"}"#,
            "no classes to compare",
        ),
        (
            r#"{"schema":"crawlguard.report/v1","classes":[{"class":"human","requests":-5}]}"#,
            "classes[0].requests: not a whole number of requests",
        ),
        (
            r#"{"schema":"crawlguard.report/v1","classes":[{"class":"human","requests":5,"share":{"2xx":1e308}}]}"#,
            "classes[0].share.2xx: not a share in 0..1",
        ),
        (
            r#"{"schema":"crawlguard.report/v1","classes":[{"class":"human","requests":5},{"class":"human","requests":6}]}"#,
            "classes[1]: class \"human\" listed twice",
        ),
    ] {
        let f = write_tmp(&dir, "odd.json", doc);
        let (code, out, err) = report(&["--baseline", &f]);
        assert_eq!((code, out.as_str()), (2, ""), "{doc}: {err}");
        assert!(err.contains(why), "{doc}: {err}");
    }
    let (code, _, err) = report(&["--baseline", "/nonexistent/yesterday.json"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("crawlguard report: --baseline /nonexistent/yesterday.json: "),
        "{err}"
    );
}
