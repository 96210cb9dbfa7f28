//! `report` without `--json`: the document as aligned text tables.

use super::document::{GroupJson, MinuteJson, ReportJson};
use crate::table::{pct, TextTable};

fn ms(v: Option<u32>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn group_row(name: String, g: &GroupJson) -> Vec<String> {
    let o = &g.rejections_by_origin;
    vec![
        name,
        g.requests.to_string(),
        pct(g.share.s2xx),
        pct(g.share.s429),
        pct(g.share.s503),
        pct(g.share.s5xx),
        o.crawlguard.to_string(),
        o.crawlguard_shed.to_string(),
        o.upstream.to_string(),
        (o.other_envoy + o.unknown).to_string(),
        g.ttfb_ms.n.to_string(),
        ms(g.ttfb_ms.p50),
        ms(g.ttfb_ms.p95),
        ms(g.ttfb_ms.p99),
    ]
}

const GROUP_HEAD: [&str; 13] = [
    "requests",
    "2xx",
    "429",
    "503",
    "5xx",
    "rej:cg",
    "rej:shed",
    "rej:up",
    "rej:other",
    "ttfb n",
    "p50 ms",
    "p95 ms",
    "p99 ms",
];

/// The report as aligned text tables.
pub fn render(j: &ReportJson) -> String {
    let mut out = String::new();
    let files: Vec<String> = j
        .inputs
        .iter()
        .map(|f| {
            let mut s = format!(
                "{}: {}, {} lines, {} parsed, {} unparsable",
                f.name,
                f.format.map_or("no format recognised", |f| f.as_str()),
                f.lines,
                f.parsed,
                f.unparsable
            );
            if f.too_long > 0 {
                s += &format!(
                    " ({} longer than {} bytes, skipped)",
                    f.too_long,
                    crate::input::MAX_LINE_BYTES
                );
            }
            if !f.unparsable_examples.is_empty() {
                let ex: Vec<String> = f.unparsable_examples.iter().map(u64::to_string).collect();
                s += &format!(" (line {})", ex.join(", "));
            }
            if let Some(e) = &f.error {
                s += &format!("; ERROR: {e}");
            }
            s
        })
        .collect();
    out += &format!(
        "crawlguard report: {} lines, {} parsed, {} unparsable\n",
        j.lines, j.parsed, j.unparsable
    );
    for f in files {
        out += &format!("  {f}\n");
    }
    if let (Some(a), Some(b)) = (&j.first, &j.last) {
        out += &format!("  time: {a} .. {b}\n");
    }
    out += &format!(
        "  class: {} logged by crawlguard, {} from the filter's classifier on the User-Agent \
         (crawler claims count as unverified_bot)\n",
        j.class_source.logged, j.class_source.classifier
    );
    out += "\nper class (shares of requests; rej: 429/503 by origin cg = crawlguard's rate \
            limit, shed = crawlguard's load shedding, up = upstream; ttfb = upstream time, \
            nearest rank)\n";
    let mut t = TextTable::new(std::iter::once("class").chain(GROUP_HEAD));
    for c in &j.classes {
        t.row(group_row(c.class.to_string(), &c.group));
    }
    out += &t.render();
    if j.routes.len() > 1 {
        out += "\nper route (crawlguard routes of the configuration, from the path)\n";
        let mut t = TextTable::new(std::iter::once("route").chain(GROUP_HEAD));
        for r in &j.routes {
            t.row(group_row(r.route.clone(), &r.group));
        }
        out += &t.render();
    }
    if !j.bots.is_empty() {
        out += "\nper bot id (known bots; class = the catalog's, granted only when verified)\n";
        let mut t = TextTable::new(["bot", "class"].into_iter().chain(GROUP_HEAD));
        for b in &j.bots {
            let mut row = group_row(b.bot.clone(), &b.group);
            let class = if b.verify {
                format!("{} (verify)", b.catalog_class)
            } else {
                b.catalog_class.to_string()
            };
            row.insert(1, class);
            t.row(row);
        }
        out += &t.render();
    }
    let minutes = |title: &str, v: &[MinuteJson]| -> String {
        let mut s = format!("\n{title}\n");
        if v.is_empty() {
            s += "  none\n";
            return s;
        }
        let mut t = TextTable::new(["minute (UTC)", "requests", "429", "429+503", "429 by class"]);
        for m in v {
            let by: Vec<String> = m
                .s429_by_class
                .iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect();
            t.row(vec![
                m.minute.clone(),
                m.requests.to_string(),
                m.s429.to_string(),
                m.rejected.to_string(),
                by.join(", "),
            ]);
        }
        s += &t.render();
        s
    };
    out += &minutes("top 5 minutes by 429 count", &j.top_429_minutes);
    out += &minutes("busiest 5 minutes", &j.busiest_minutes);
    if !j.minutes_exact {
        out += &format!(
            "  (approximate: over {} minutes of log read out of time order)\n",
            crate::minutes::MAX_MINUTE_ROWS
        );
    }
    out += &format!(
        "\ntop talkers by client address{}\n",
        if j.top_talkers.error_bound == 0 {
            " (exact)".to_string()
        } else {
            format!(
                " (counts may be low by up to {})",
                j.top_talkers.error_bound
            )
        }
    );
    let mut t = TextTable::new(["client", "requests", "429/503", "class (latest)"]);
    for c in &j.top_talkers.clients {
        t.row(vec![
            c.client.clone(),
            c.requests.to_string(),
            c.rejected.to_string(),
            c.class.to_string(),
        ]);
    }
    out += &t.render();
    if !j.limits.is_empty() {
        out += "\nrejections by limit (logged RateLimit-Policy)\n";
        let mut t = TextTable::new(["limit", "rejections"]);
        for (l, n) in &j.limits {
            t.row(vec![l.clone(), n.to_string()]);
        }
        out += &t.render();
    }
    out
}
