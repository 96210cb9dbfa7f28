//! `report --fail-if` and `report --baseline`: thresholds that set the exit status, so a
//! cron job can run the daily report and fail when crawlers fare badly.
//!
//! Both read the `--json` document (a [`serde_json::Value`] of [`super::ReportJson`]), the
//! baseline being the same document from an earlier run, so a threshold sees exactly what
//! `--json` prints.
//!
//! `--fail-if` grammar (spaces around the operator optional):
//!
//! ```text
//! EXPR    = SUBJECT "." METRIC OP VALUE
//! SUBJECT = CLASS | "bot:" BOT_ID | "route:" ROUTE
//! METRIC  = requests | rejected_share | success_rate | share_429 | share_503 | share_5xx
//!         | ttfb_p50_ms | ttfb_p95_ms | ttfb_p99_ms
//! OP      = ">" | ">=" | "<" | "<="
//! VALUE   = NUMBER ["%"]          (a share: "1%" or "0.01"; requests and ms: no "%")
//! ```
//!
//! The expression names the failure: `search_crawler.rejected_share > 1%` fails when more
//! than 1% of the class's requests were rejected by crawlguard (its rate limit or its load
//! shedding). A subject absent from the log has 0 requests; its shares and times are not
//! defined, so a threshold on them passes and says "no requests".

use crawlguard_core::identity::class::Class;
use serde_json::Value;

/// One `--fail-if` expression, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    /// The expression as given (trimmed), for messages.
    pub text: String,
    subject: Subject,
    metric: Metric,
    op: Op,
    /// The threshold, a fraction for shares.
    value: f64,
}

#[derive(Debug, Clone, PartialEq)]
enum Subject {
    Class(Class),
    Bot(String),
    Route(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Metric {
    Requests,
    RejectedShare,
    SuccessRate,
    Share429,
    Share503,
    Share5xx,
    TtfbP50,
    TtfbP95,
    TtfbP99,
}

/// Every metric name, in the grammar's order.
pub const METRICS: [&str; 9] = [
    "requests",
    "rejected_share",
    "success_rate",
    "share_429",
    "share_503",
    "share_5xx",
    "ttfb_p50_ms",
    "ttfb_p95_ms",
    "ttfb_p99_ms",
];

impl Metric {
    fn parse(s: &str) -> Option<Metric> {
        let all = [
            Metric::Requests,
            Metric::RejectedShare,
            Metric::SuccessRate,
            Metric::Share429,
            Metric::Share503,
            Metric::Share5xx,
            Metric::TtfbP50,
            Metric::TtfbP95,
            Metric::TtfbP99,
        ];
        METRICS
            .iter()
            .zip(all)
            .find(|(n, _)| **n == s)
            .map(|(_, m)| m)
    }

    fn is_share(self) -> bool {
        matches!(
            self,
            Metric::RejectedShare
                | Metric::SuccessRate
                | Metric::Share429
                | Metric::Share503
                | Metric::Share5xx
        )
    }

    /// The metric of a report group (`classes[]`, `bots[]` or `routes[]` entry); `None`
    /// when not defined (no requests, no upstream times).
    fn of(self, g: &Value) -> Option<f64> {
        let requests = g["requests"].as_f64().unwrap_or(0.0);
        if self == Metric::Requests {
            return Some(requests);
        }
        if requests == 0.0 {
            return None;
        }
        let share = |k: &str| g["share"][k].as_f64();
        match self {
            Metric::Requests => Some(requests),
            Metric::RejectedShare => {
                let o = &g["rejections_by_origin"];
                let n = o["crawlguard"].as_f64().unwrap_or(0.0)
                    + o["crawlguard_shed"].as_f64().unwrap_or(0.0);
                Some(n / requests)
            }
            Metric::SuccessRate => share("2xx"),
            Metric::Share429 => share("429"),
            Metric::Share503 => share("503"),
            Metric::Share5xx => share("5xx"),
            Metric::TtfbP50 => g["ttfb_ms"]["p50"].as_f64(),
            Metric::TtfbP95 => g["ttfb_ms"]["p95"].as_f64(),
            Metric::TtfbP99 => g["ttfb_ms"]["p99"].as_f64(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Gt,
    Ge,
    Lt,
    Le,
}

impl Op {
    fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Op::Gt => a > b,
            Op::Ge => a >= b,
            Op::Lt => a < b,
            Op::Le => a <= b,
        }
    }
}

/// The grammar, for error messages.
pub const GRAMMAR: &str = "SUBJECT.METRIC OP VALUE, e.g. 'search_crawler.rejected_share > 1%'; \
SUBJECT: a class, bot:ID or route:NAME; METRIC: requests, rejected_share, success_rate, \
share_429, share_503, share_5xx, ttfb_p50_ms, ttfb_p95_ms, ttfb_p99_ms; OP: > >= < <=; \
VALUE: a number, with % for a share";

/// The first threshold whose `bot:` or `route:` subject `cfg` does not know, as an error
/// naming what it does know: a typo must not turn a cron job's check into a silent
/// "no requests" pass.
pub fn unknown_subject(
    thresholds: &[Threshold],
    cfg: &crawlguard_core::config::Config,
) -> Option<String> {
    thresholds.iter().find_map(|t| match &t.subject {
        Subject::Bot(id) => {
            let entries = cfg.classifier.entries();
            let agents = &cfg.signed_agents.agents;
            let known = entries.iter().any(|e| &e.id == id)
                || cfg.classifier.non_browser().id == *id
                || agents.iter().any(|a| &a.id == id);
            (!known).then(|| {
                format!(
                    "--fail-if {:?}: unknown bot id {id:?} (the configuration's bots, e.g. \
                     googlebot, bingbot, gptbot; `crawlguard classify <User-Agent>` names one)",
                    t.text
                )
            })
        }
        Subject::Route(name) => {
            let names: Vec<&str> = (0..=cfg.routes.len()).map(|i| cfg.route_name(i)).collect();
            (!names.contains(&name.as_str())).then(|| {
                format!(
                    "--fail-if {:?}: unknown route {name:?} (routes: {}; give the \
                     configuration's with --config)",
                    t.text,
                    names.join(", ")
                )
            })
        }
        Subject::Class(_) => None,
    })
}

/// Parses a `--fail-if` expression; the error says what is wrong and the grammar.
pub fn parse(expr: &str) -> Result<Threshold, String> {
    let text = expr.trim();
    let err = |what: String| format!("--fail-if {text:?}: {what} (grammar: {GRAMMAR})");
    let at = text
        .find(['<', '>'])
        .ok_or_else(|| err("no comparison (>, >=, <, <=)".into()))?;
    let (lhs, rest) = text.split_at(at);
    let (op, rhs) = if let Some(r) = rest.strip_prefix(">=") {
        (Op::Ge, r)
    } else if let Some(r) = rest.strip_prefix("<=") {
        (Op::Le, r)
    } else if let Some(r) = rest.strip_prefix('>') {
        (Op::Gt, r)
    } else if let Some(r) = rest.strip_prefix('<') {
        (Op::Lt, r)
    } else {
        return Err(err("no comparison".into()));
    };
    let (subject, metric) = lhs
        .trim()
        .rsplit_once('.')
        .ok_or_else(|| err("expected SUBJECT.METRIC before the comparison".into()))?;
    let metric = Metric::parse(metric).ok_or_else(|| err(format!("unknown metric {metric:?}")))?;
    let subject = if let Some(b) = subject.strip_prefix("bot:") {
        Subject::Bot(non_empty(b).ok_or_else(|| err("empty bot id".into()))?)
    } else if let Some(r) = subject.strip_prefix("route:") {
        Subject::Route(non_empty(r).ok_or_else(|| err("empty route name".into()))?)
    } else {
        Subject::Class(Class::parse(subject).ok_or_else(|| {
            err(format!(
                "unknown class {subject:?} (classes: {}; or bot:ID, route:NAME)",
                Class::ALL.map(Class::as_str).join(", ")
            ))
        })?)
    };
    let value = parse_value(rhs.trim(), metric.is_share()).map_err(err)?;
    Ok(Threshold {
        text: text.to_string(),
        subject,
        metric,
        op,
        value,
    })
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// A threshold value: a share as `N%` or a fraction 0..=1; a count or ms as a plain
/// non-negative number.
fn parse_value(s: &str, share: bool) -> Result<f64, String> {
    let (num, percent) = match s.strip_suffix('%') {
        Some(n) => (n.trim(), true),
        None => (s, false),
    };
    let v: f64 = num
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("the value {s:?} is not a non-negative number"))?;
    match (share, percent) {
        (true, true) if v <= 100.0 => Ok(v / 100.0),
        (true, false) if v <= 1.0 => Ok(v),
        (true, _) => Err(format!(
            "a share is at most 100% (write 1% or 0.01), not {s:?}"
        )),
        (false, true) => Err(format!("{s:?}: only shares take %")),
        (false, false) => Ok(v),
    }
}

/// `--max-change`: a share, `30%` or `0.3`.
pub fn parse_max_change(s: &str) -> Result<f64, String> {
    parse_value(s.trim(), true).map_err(|e| format!("--max-change: {e}"))
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Outcome {
    /// What was checked: the expression, or `baseline: <class> traffic|success_rate`.
    pub check: String,
    /// True when the check failed (the exit status becomes 1).
    pub failed: bool,
    /// The value found, in words (e.g. `2.50% (10 of 400 requests)`).
    pub found: String,
}

/// The group of `subject` in report `r`, if the log had it.
fn group<'a>(r: &'a Value, subject: &Subject) -> Option<&'a Value> {
    let (list, key, name) = match subject {
        Subject::Class(c) => ("classes", "class", c.as_str()),
        Subject::Bot(b) => ("bots", "bot", b.as_str()),
        Subject::Route(n) => ("routes", "route", n.as_str()),
    };
    r[list].as_array()?.iter().find(|g| g[key] == name)
}

fn fmt_value(metric: Metric, v: f64) -> String {
    if metric.is_share() {
        format!("{:.2}%", v * 100.0)
    } else {
        format!("{v}")
    }
}

/// Evaluates each threshold on report `r`.
pub fn check(r: &Value, thresholds: &[Threshold]) -> Vec<Outcome> {
    thresholds
        .iter()
        .map(|t| {
            let g = group(r, &t.subject).unwrap_or(&Value::Null);
            let requests = g["requests"].as_u64().unwrap_or(0);
            match t.metric.of(g) {
                Some(v) => Outcome {
                    check: t.text.clone(),
                    failed: t.op.holds(v, t.value),
                    found: if t.metric == Metric::Requests {
                        format!("{requests} requests")
                    } else {
                        format!("{} ({requests} requests)", fmt_value(t.metric, v))
                    },
                },
                None => Outcome {
                    check: t.text.clone(),
                    failed: false,
                    found: if requests == 0 {
                        "no requests".into()
                    } else {
                        "no upstream times".into()
                    },
                },
            }
        })
        .collect()
}

/// Compares report `r` with `baseline` (an earlier `report --json`) class by class: a
/// class of the baseline whose requests, or whose success rate (share of 2xx), moved by
/// more than `max_change` of its baseline value, either way, fails. Classes only in `r` are
/// not compared (they have no baseline).
pub fn compare(r: &Value, baseline: &Value, max_change: f64) -> Vec<Outcome> {
    let mut out = Vec::new();
    for b in baseline["classes"].as_array().into_iter().flatten() {
        let Some(name) = b["class"].as_str() else {
            continue;
        };
        let Some(class) = Class::parse(name) else {
            continue;
        };
        let t = group(r, &Subject::Class(class)).unwrap_or(&Value::Null);
        for (what, metric) in [
            ("traffic", Metric::Requests),
            ("success_rate", Metric::SuccessRate),
        ] {
            let (Some(was), now) = (metric.of(b), metric.of(t)) else {
                continue;
            };
            if was == 0.0 {
                continue;
            }
            let shown = |v: f64| match metric {
                Metric::Requests => format!("{v}"),
                _ => fmt_value(metric, v),
            };
            let check = format!(
                "baseline: {name} {what} moves at most {}",
                fmt_value(Metric::SuccessRate, max_change)
            );
            // A class gone from the log has 0 requests (its traffic check fails) and no
            // success rate: that check passes and says so, as a threshold does.
            let Some(now_v) = now else {
                out.push(Outcome {
                    check,
                    failed: false,
                    found: format!("{} -> no requests", shown(was)),
                });
                continue;
            };
            let change = (now_v - was) / was;
            out.push(Outcome {
                check,
                failed: change.abs() > max_change,
                found: format!(
                    "{} -> {} ({:+.1}%)",
                    shown(was),
                    shown(now_v),
                    change * 100.0
                ),
            });
        }
    }
    out
}

/// The outcomes as the text report's last section.
pub fn render(outcomes: &[Outcome]) -> String {
    let mut s = String::from("\nthresholds (FAILED sets exit status 1)\n");
    for o in outcomes {
        s.push_str(&format!(
            "{:<7} {}: {}\n",
            if o.failed { "FAILED" } else { "ok" },
            o.check,
            o.found
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn expressions_parse_to_what_they_say() {
        let t = parse(" search_crawler.rejected_share > 1% ").expect("valid");
        assert_eq!(t.text, "search_crawler.rejected_share > 1%");
        assert_eq!(t.subject, Subject::Class(Class::SearchCrawler));
        assert_eq!(
            (t.metric, t.op, t.value),
            (Metric::RejectedShare, Op::Gt, 0.01)
        );
        let t = parse("bot:archive.org_bot.requests<=10").expect("valid");
        assert_eq!(t.subject, Subject::Bot("archive.org_bot".into()));
        assert_eq!((t.metric, t.op, t.value), (Metric::Requests, Op::Le, 10.0));
        let t = parse("route:api.success_rate < 0.995").expect("valid");
        assert_eq!(t.subject, Subject::Route("api".into()));
        assert_eq!((t.op, t.value), (Op::Lt, 0.995));
        assert_eq!(
            parse("human.ttfb_p95_ms >= 250").map(|t| t.value),
            Ok(250.0)
        );
    }

    #[test]
    fn bad_expressions_are_refused_with_the_reason() {
        for (e, why) in [
            ("search_crawler.rejected_share", "no comparison"),
            ("search_crawler.rejected_share = 1%", "no comparison"),
            ("rejected_share > 1%", "expected SUBJECT.METRIC"),
            ("crawlers.rejected_share > 1%", "unknown class \"crawlers\""),
            (
                "search_crawler.rejected > 1%",
                "unknown metric \"rejected\"",
            ),
            (
                "search_crawler.rejected_share > 2",
                "a share is at most 100%",
            ),
            (
                "search_crawler.rejected_share > 101%",
                "a share is at most 100%",
            ),
            ("search_crawler.requests > 5%", "only shares take %"),
            ("search_crawler.requests > -5", "not a non-negative number"),
            ("search_crawler.requests > ", "not a non-negative number"),
            ("bot:.requests > 1", "empty bot id"),
        ] {
            let msg = parse(e).expect_err(e);
            assert!(msg.contains(why), "{e}: {msg}");
            assert!(msg.contains("grammar: SUBJECT.METRIC OP VALUE"), "{msg}");
        }
    }

    fn report(classes: Value) -> Value {
        json!({ "classes": classes, "bots": [], "routes": [] })
    }

    fn class(name: &str, requests: u64, ok: u64, rejected: u64) -> Value {
        let share = |n: u64| n as f64 / requests as f64;
        json!({"class": name, "requests": requests, "share": {"2xx": share(ok)},
               "rejections_by_origin": {"crawlguard": rejected, "crawlguard_shed": 0},
               "ttfb_ms": {"p95": null}})
    }

    #[test]
    fn thresholds_fail_exactly_when_the_expression_holds() {
        let r = report(json!([class("search_crawler", 400, 390, 10)]));
        let t = |e: &str| check(&r, &[parse(e).expect("valid")]).remove(0);
        let o = t("search_crawler.rejected_share > 1%");
        assert!(o.failed);
        assert_eq!(o.found, "2.50% (400 requests)");
        assert!(!t("search_crawler.rejected_share > 2.5%").failed);
        assert!(t("search_crawler.rejected_share >= 2.5%").failed);
        assert!(t("search_crawler.success_rate < 98%").failed);
        assert!(!t("search_crawler.requests < 400").failed);
        // Absent: 0 requests; shares undefined, so they pass.
        let o = t("ai_retriever.requests < 1");
        assert_eq!((o.failed, o.found.as_str()), (true, "0 requests"));
        let o = t("ai_retriever.rejected_share > 1%");
        assert_eq!((o.failed, o.found.as_str()), (false, "no requests"));
        let o = t("search_crawler.ttfb_p95_ms > 100");
        assert_eq!((o.failed, o.found.as_str()), (false, "no upstream times"));
    }

    #[test]
    fn a_baseline_flags_traffic_and_success_rate_moves_over_the_share() {
        let base = report(json!([
            class("search_crawler", 1000, 950, 0),
            class("human", 100, 100, 0),
            class("ai_trainer", 10, 10, 0)
        ]));
        let today = report(json!([
            class("search_crawler", 650, 600, 0),
            class("human", 129, 129, 0)
        ]));
        let got: Vec<(String, bool, String)> = compare(&today, &base, 0.3)
            .into_iter()
            .map(|o| (o.check, o.failed, o.found))
            .collect();
        let row = |c: &str, f: bool, v: &str| (c.to_string(), f, v.to_string());
        assert_eq!(
            got,
            [
                row(
                    "baseline: search_crawler traffic moves at most 30.00%",
                    true,
                    "1000 -> 650 (-35.0%)"
                ),
                row(
                    "baseline: search_crawler success_rate moves at most 30.00%",
                    false,
                    "95.00% -> 92.31% (-2.8%)"
                ),
                row(
                    "baseline: human traffic moves at most 30.00%",
                    false,
                    "100 -> 129 (+29.0%)"
                ),
                row(
                    "baseline: human success_rate moves at most 30.00%",
                    false,
                    "100.00% -> 100.00% (+0.0%)"
                ),
                row(
                    "baseline: ai_trainer traffic moves at most 30.00%",
                    true,
                    "10 -> 0 (-100.0%)"
                ),
                row(
                    "baseline: ai_trainer success_rate moves at most 30.00%",
                    false,
                    "100.00% -> no requests"
                ),
            ]
        );
        assert_eq!(parse_max_change("30%"), Ok(0.3));
        assert_eq!(parse_max_change("0.3"), Ok(0.3));
        assert!(parse_max_change("130%").is_err());
    }
}
