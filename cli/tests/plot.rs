//! `crawlguard report --plot`: bins that fit the span (1 s for a one-minute log such as
//! `make run`'s, 1 h for the three-day Apache log), stacked per-class layers, crawlguard's
//! rejections (rate limit, shed) drawn apart from the origin's and Envoy's errors, and the
//! SVG's titles, axis titles with units, and one rectangle per drawn bin and class.

mod common;

use common::{write_tmp, APACHE_LOG, BIN, BROWSER_UA, GOOGLEBOT_UA};

use crawlguard_cli::input;
use crawlguard_cli::plot::{panels, Panel};
use crawlguard_cli::report::Report;
use crawlguard_cli::timeline::{
    width_words, Kind, PlotBins, Timeline, LADDER_S, MAX_PLOT_BINS, MAX_STORED_BINS,
};
use crawlguard_core::config;
use crawlguard_core::identity::classify::Class;
use std::process::Command;

/// One crawlguard-format line (envoy/envoy.yaml) at `ms` into 2026-12-01 07:00 UTC.
fn line(ms: u32, status: u16, details: &str, class: &str, ua: &str) -> String {
    let up = if details == "via_upstream" { "2" } else { "-" };
    format!(
        "[2026-12-01T07:00:{:02}.{:03}Z] 127.0.0.1 \"GET /\" {status} {details} class={class} \
         retry_after=- duration_ms=1 upstream_ms={up} limit=- ua=\"{ua}\"\n",
        ms / 1000,
        ms % 1000
    )
}

/// A one-minute log shaped like `make run`'s: 138 requests, 120 rejected by crawlguard.
/// 8 browser requests (seconds 0, 9, .., 54 and 59), a curl flood of 100 (10 a second over
/// seconds 10..19, the first 10 allowed), 30 spoofed Googlebot requests (5 a second over
/// seconds 30..35, all rejected).
fn make_run_log() -> String {
    let mut t = String::new();
    for s in [0, 9, 18, 27, 36, 45, 54, 59] {
        t += &line(s * 1000, 200, "via_upstream", "human", BROWSER_UA);
    }
    for i in 0..100 {
        let (st, d) = if i < 10 {
            (200, "via_upstream")
        } else {
            (429, "crawlguard_rate_limited")
        };
        t += &line(10_000 + i * 100, st, d, "script", "curl/8.5.0");
    }
    for i in 0..30 {
        t += &line(
            30_000 + i * 200,
            429,
            "crawlguard_rate_limited",
            "spoofed",
            GOOGLEBOT_UA,
        );
    }
    t
}

fn report(paths: &[String]) -> Report {
    let mut rep = Report::new(config::parse(b"").expect("default"));
    rep.inputs = input::each_input(paths, None, &mut |r| rep.add(r));
    rep
}

/// Per class in a panel: its own count per bin (the layer minus the one below).
fn own(panel: &Panel, class: Class) -> Vec<u64> {
    let i = panel.layers.iter().position(|(c, _)| *c == class);
    let Some(i) = i else {
        return Vec::new();
    };
    let below = i.checked_sub(1).and_then(|j| panel.layers.get(j));
    panel.layers[i]
        .1
        .iter()
        .enumerate()
        .map(|(k, top)| top - below.map_or(0, |(_, b)| b[k]))
        .collect()
}

fn total(panel: &Panel) -> u64 {
    panel.layers.last().map_or(0, |(_, tops)| tops.iter().sum())
}

fn classes(panel: &Panel) -> Vec<Class> {
    panel.layers.iter().map(|(c, _)| *c).collect()
}

/// DecisionCounts at `ks` and zero elsewhere, over `n` bins.
fn at(n: usize, ks: impl IntoIterator<Item = (usize, u64)>) -> Vec<u64> {
    let mut v = vec![0; n];
    for (k, c) in ks {
        v[k] = c;
    }
    v
}

#[test]
fn one_minute_log_has_one_second_bins_stacked_by_class() {
    let dir = tempfile::tempdir().expect("tmp");
    let rep = report(&[write_tmp(&dir, "run.log", &make_run_log())]);
    let p: PlotBins = rep.timeline.plot_bins();
    assert_eq!((p.width_s, p.bins.len()), (1, 60));
    assert_eq!(p.start_s, 1_796_108_400); // 2026-12-01T07:00:00Z
    let (order, ps) = panels(&p);
    // Largest class at the bottom of every stack.
    assert_eq!(order, [Class::Script, Class::Spoofed, Class::Human]);
    let [req, cg, other] = &ps[..] else {
        panic!("{} panels", ps.len());
    };
    assert_eq!(req.y_title, "requests per 1 s");
    assert_eq!(cg.y_title, "rejections per 1 s");
    assert_eq!(other.y_title, "responses per 1 s");
    assert_eq!(total(req), 138);
    assert_eq!(total(cg), 120);
    assert_eq!(total(other), 0);
    assert_eq!(classes(req), order);
    assert_eq!(own(req, Class::Script), at(60, (10..20).map(|k| (k, 10))));
    assert_eq!(own(req, Class::Spoofed), at(60, (30..36).map(|k| (k, 5))));
    let human = [0, 9, 18, 27, 36, 45, 54, 59].map(|k| (k, 1));
    assert_eq!(own(req, Class::Human), at(60, human));
    // Stacked: each layer's top is the sum of the layers up to it (second 18: 10 + 0 + 1).
    assert_eq!(
        req.layers.iter().map(|(_, t)| t[18]).collect::<Vec<_>>(),
        [10, 10, 11]
    );
    assert_eq!(classes(cg), [Class::Script, Class::Spoofed]);
    assert_eq!(own(cg, Class::Script), at(60, (11..20).map(|k| (k, 10))));
    assert_eq!(own(cg, Class::Spoofed), at(60, (30..36).map(|k| (k, 5))));
    assert_eq!(cg.line, None, "nothing shed");
}

#[test]
fn origin_errors_are_drawn_apart_from_crawlguards_rejections() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut text = make_run_log();
    // Origin trouble: 10 origin 503s over seconds 40..44, 2 Envoy 503s (no healthy
    // upstream) at second 41, then crawlguard sheds 6 script requests at 45..47.
    for i in 0..10 {
        text += &line(40_000 + i * 500, 503, "via_upstream", "human", BROWSER_UA);
    }
    for _ in 0..2 {
        text += &line(41_100, 503, "no_healthy_upstream", "human", BROWSER_UA);
    }
    for i in 0..6 {
        text += &line(
            45_100 + i * 500,
            503,
            "crawlguard_shed",
            "script",
            "curl/8.5.0",
        );
    }
    let rep = report(&[write_tmp(&dir, "trouble.log", &text)]);
    let p = rep.timeline.plot_bins();
    assert_eq!((p.width_s, p.bins.len()), (1, 60));
    let (_, ps) = panels(&p);
    let [req, cg, other] = &ps[..] else {
        panic!("{} panels", ps.len());
    };
    assert_eq!(total(req), 138 + 18);
    // crawlguard's: the 120 rate-limit rejections and the 6 shed, the shed also as a line.
    assert_eq!(total(cg), 126);
    assert_eq!(
        own(cg, Class::Script),
        at(
            60,
            (11..20).map(|k| (k, 10)).chain((45..48).map(|k| (k, 2)))
        )
    );
    let (label, shed) = cg.line.clone().expect("shed line");
    assert_eq!(label, "of which shed (503)");
    assert_eq!(shed, at(60, (45..48).map(|k| (k, 2))));
    // Not crawlguard's: the 12 origin and Envoy 503s, and only there.
    assert_eq!(classes(other), [Class::Human]);
    assert_eq!(
        own(other, Class::Human),
        at(60, [(40, 2), (41, 4), (42, 2), (43, 2), (44, 2)])
    );
    assert_eq!(own(cg, Class::Human), Vec::<u64>::new());
}

#[test]
fn bins_fit_the_span() {
    // (span, bin width, bins drawn): at most 150 bins, the finest round width that fits.
    for (span_s, width_s, n) in [
        (60, 1, 60),
        (150, 1, 150),
        (151, 5, 31),
        (600, 5, 120),
        (3600, 30, 120),
        (86_400, 900, 96),
        (7 * 86_400, 10_800, 56),
        (365 * 86_400, 604_800, 53),
    ] {
        let mut t = Timeline::default();
        let t0: i64 = 1_796_083_200_000; // 2026-12-01T00:00:00Z
        t.add(t0, Class::Human, Kind::Served);
        t.add(t0 + (span_s - 1) * 1000, Class::Human, Kind::Served);
        let p = t.plot_bins();
        assert_eq!((p.width_s, p.bins.len()), (width_s, n), "span {span_s} s");
        assert_eq!(p.start_s % width_s, 0);
        let sum: u32 = p.bins.iter().map(|b| b.requests.iter().sum::<u32>()).sum();
        assert_eq!(sum, 2);
    }
}

#[test]
fn apache_log_has_hour_bins_and_its_5xx_apart() {
    let rep = report(&[APACHE_LOG.to_string()]);
    let p = rep.timeline.plot_bins();
    // 2015-05-17 10:05 .. 2015-05-20 21:05: hours 10:00 on the 17th to 21:00 on the 20th.
    assert_eq!((p.width_s, p.bins.len()), (3600, 84));
    let (order, ps) = panels(&p);
    assert_eq!(
        order,
        [
            Class::Human,
            Class::OtherBot,
            Class::UnverifiedBot,
            Class::Script
        ]
    );
    assert_eq!(total(&ps[0]), 9_999);
    assert_eq!(
        total(&ps[1]),
        0,
        "no rejection by crawlguard in an Apache log"
    );
    // Its 5xx (2 unverified_bot, 1 other_bot): the origin's, never crawlguard's.
    assert_eq!(total(&ps[2]), 3);
    assert_eq!(classes(&ps[2]), [Class::OtherBot, Class::UnverifiedBot]);
}

/// The text of every `<text>` element of an SVG document.
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = t.split_once('>')?.1;
            Some(body.split_once("</text>")?.0.trim().to_string())
        })
        .collect()
}

#[test]
fn svg_has_titles_axis_titles_and_a_rectangle_per_bin_and_class() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = write_tmp(&dir, "run.log", &make_run_log());
    let svg = dir.path().join("run.svg");
    let out = Command::new(BIN)
        .args(["report", &log, "--plot"])
        .arg(&svg)
        .output()
        .expect("run");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "a font was found");
    let text = std::fs::read_to_string(&svg).expect("svg");
    let texts = svg_texts(&text);
    for want in [
        "crawlguard report: 2026-12-01 07:00:00 .. 2026-12-01 07:01:00 UTC, bins of 1 s",
        "requests by class, per 1 s",
        "rejected by crawlguard: rate limit (429/503) and shed (503), by class, per 1 s",
        "429 and 5xx not from crawlguard (origin, Envoy, unknown), by class, per 1 s",
        "requests per 1 s",
        "rejections per 1 s",
        "responses per 1 s",
        "time (UTC)",
        "no 429 or 5xx from the origin or Envoy in this log",
        "script",
        "spoofed",
        "human",
        // Ticks every 10 s, the last one inside the picture.
        "07:00:00",
        "07:00:50",
    ] {
        assert!(texts.iter().any(|t| t == want), "{want:?} not in {texts:?}");
    }
    // One filled rectangle per bin with a count, per class and panel, plus its legend box.
    let (_, ps) = panels(&report(&[log]).timeline.plot_bins());
    for (class, fill) in [
        (Class::Script, "#FF7F0E"),
        (Class::Spoofed, "#D62728"),
        (Class::Human, "#2CA02C"),
    ] {
        let drawn: usize = ps
            .iter()
            .filter_map(|p| p.layers.iter().find(|(c, _)| *c == class))
            .map(|(_, tops)| tops.iter().filter(|v| **v > 0).count())
            .sum();
        let rects = text
            .matches("<rect")
            .zip(text.split("<rect").skip(1))
            .filter(|(_, r)| r.split('>').next().is_some_and(|a| a.contains(fill)))
            .count();
        assert_eq!(rects, drawn + 1, "{class:?}");
    }
}

#[test]
fn readme_states_the_bin_widths_and_bounds() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README");
    let flat = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    let widths: Vec<String> = LADDER_S.iter().map(|w| width_words(*w)).collect();
    let (last, rest) = widths.split_last().expect("ladder");
    for want in [
        format!(
            "{}, {last} giving at most {MAX_PLOT_BINS} bins",
            rest.join(", ")
        ),
        format!(
            "at most {},{:03} are kept",
            MAX_STORED_BINS / 1000,
            MAX_STORED_BINS % 1000
        ),
    ] {
        assert!(flat.contains(&want), "README does not say {want:?}");
    }
}
