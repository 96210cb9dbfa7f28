//! `report --plot FILE.svg|png`: the incident picture. Three panels over the same time axis,
//! each stacked by class (largest class at the bottom, so small classes stay visible on
//! top of it), bins from [`Timeline::plot_bins`] (1 s for a one-minute log, 1 h for three
//! days):
//! 1. requests;
//! 2. crawlguard's rejections: its rate limit (429 or 503) and its shed 503s, with the shed
//!    ones also drawn as a black line;
//! 3. 429s and 5xx that crawlguard did not answer (the origin's, Envoy's, or unknown).
//!
//! Text needs a TrueType font (plotters draws glyphs itself): `--font`, `$CRAWLGUARD_FONT`,
//! or a common system font (DejaVu Sans, Liberation Sans, Arial). Without one the plot is
//! drawn without text and a note says so.

use crate::timeline::{coarser, width_words, Bin, PlotBins, Timeline};
use crawlguard_core::identity::classify::Class;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Size of the picture, pixels.
pub const SIZE: (u32, u32) = (1400, 1000);

/// Width of the legend column on the right, pixels.
const LEGEND_W: u32 = 200;

/// Fonts tried when none is given.
const SYSTEM_FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/Library/Fonts/Arial.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

fn color(c: Class) -> RGBColor {
    match c {
        Class::SearchCrawler => RGBColor(31, 119, 180),
        Class::AiRetriever => RGBColor(23, 190, 207),
        Class::AiTrainer => RGBColor(148, 103, 189),
        Class::OtherBot => RGBColor(140, 86, 75),
        Class::Script => RGBColor(255, 127, 14),
        Class::Human => RGBColor(44, 160, 44),
        Class::UnverifiedBot => RGBColor(188, 189, 34),
        Class::Spoofed => RGBColor(214, 39, 40),
        Class::SuspectBrowser => RGBColor(227, 119, 194),
    }
}

/// Loads a font for text (once per process); returns where it came from, or `None`.
fn load_font(given: Option<&Path>) -> Option<PathBuf> {
    let env = std::env::var_os("CRAWLGUARD_FONT").map(PathBuf::from);
    let candidates = given
        .map(Path::to_path_buf)
        .into_iter()
        .chain(env)
        .chain(SYSTEM_FONTS.iter().map(PathBuf::from));
    for p in candidates {
        if let Ok(bytes) = std::fs::read(&p) {
            // plotters keeps registered fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return Some(p);
            }
        }
    }
    None
}

/// One panel as drawn: stacked layers, bottom first.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// Title above the panel.
    pub title: String,
    /// The y axis title, with its unit (`requests per 1 h`).
    pub y_title: String,
    /// Per class with a count in this panel, bottom layer first: the cumulative top of the
    /// layer in each bin (the last layer's tops are the bins' totals).
    pub layers: Vec<(Class, Vec<u64>)>,
    /// A line drawn over the layers (the shed 503s), when it has a count.
    pub line: Option<(String, Vec<u64>)>,
    /// Said in the panel when it has no count at all.
    pub empty_note: &'static str,
}

/// The three panels of `p` (see the module documentation), stacking classes in `order`.
pub fn panels(p: &PlotBins) -> (Vec<Class>, Vec<Panel>) {
    let per = width_words(p.width_s);
    let get = |f: fn(&Bin) -> &[u32; Class::COUNT], c: Class| -> Vec<u64> {
        p.bins
            .iter()
            .map(|b| u64::from(f(b).get(c.index()).copied().unwrap_or(0)))
            .collect()
    };
    let requests: fn(&Bin) -> &[u32; Class::COUNT] = |b| &b.requests;
    // Classes by requests, most first: the largest class lies at the bottom of each stack.
    let mut order: Vec<(Class, u64)> = Class::ALL
        .into_iter()
        .map(|c| (c, get(requests, c).iter().sum()))
        .filter(|(_, n)| *n > 0)
        .collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.index().cmp(&b.0.index())));
    let order: Vec<Class> = order.into_iter().map(|(c, _)| c).collect();
    let stack = |per_class: &dyn Fn(Class) -> Vec<u64>| {
        let mut acc = vec![0u64; p.bins.len()];
        let mut layers = Vec::new();
        for c in &order {
            let v = per_class(*c);
            if v.iter().all(|x| *x == 0) {
                continue;
            }
            for (a, x) in acc.iter_mut().zip(&v) {
                *a += x;
            }
            layers.push((*c, acc.clone()));
        }
        layers
    };
    let shed_total: Vec<u64> = p
        .bins
        .iter()
        .map(|b| b.shed.iter().map(|v| u64::from(*v)).sum())
        .collect();
    let panels = vec![
        Panel {
            title: format!("requests by class, per {per}"),
            y_title: format!("requests per {per}"),
            layers: stack(&|c| get(requests, c)),
            line: None,
            empty_note: "no requests",
        },
        Panel {
            title: format!(
                "rejected by crawlguard: rate limit (429/503) and shed (503), by class, per {per}"
            ),
            y_title: format!("rejections per {per}"),
            layers: stack(&|c| {
                let l = get(|b| &b.limited, c);
                let s = get(|b| &b.shed, c);
                l.iter().zip(&s).map(|(a, b)| a + b).collect()
            }),
            line: shed_total
                .iter()
                .any(|v| *v > 0)
                .then(|| ("of which shed (503)".to_string(), shed_total)),
            empty_note: "crawlguard rejected nothing in this log",
        },
        Panel {
            title: format!(
                "429 and 5xx not from crawlguard (origin, Envoy, unknown), by class, per {per}"
            ),
            y_title: format!("responses per {per}"),
            layers: stack(&|c| get(|b| &b.errors, c)),
            line: None,
            empty_note: "no 429 or 5xx from the origin or Envoy in this log",
        },
    ];
    (order, panels)
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of a second.
fn fmt_s(s: i64) -> String {
    let t = crate::time::fmt_ms(s.saturating_mul(1000));
    t.get(..19).unwrap_or(&t).replace('T', " ")
}

/// The x tick label of second `s`: as short as the span and bin width allow.
fn tick(s: i64, span_s: i64, width_s: i64) -> String {
    let t = fmt_s(s);
    let r = |a: usize, b: usize| t.get(a..b).unwrap_or("").to_string();
    match (span_s <= 86_400, width_s) {
        (true, w) if w < 60 => r(11, 19),
        (true, _) => r(11, 16),
        (false, w) if w < 86_400 => r(5, 16),
        _ => r(0, 10),
    }
}

/// Seconds between labelled ticks: the finest round step (a multiple of the bin width
/// `width_s`) giving at most 10 ticks over `span_s`.
fn tick_step(width_s: i64, span_s: i64) -> i64 {
    let mut step = width_s;
    while span_s / step > 10 {
        step = coarser(step);
    }
    step
}

/// Writes the plot of `tl` to `path` (`.svg` or `.png`); returns a note when drawn without
/// text.
pub fn plot(path: &Path, tl: &Timeline, font: Option<&Path>) -> Result<Option<String>, String> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    if !matches!(ext.as_str(), "svg" | "png") {
        return Err(format!(
            "{}: the plot file must end in .svg or .png",
            path.display()
        ));
    }
    let text = load_font(font).is_some();
    let p = tl.plot_bins();
    if ext == "svg" {
        let root = SVGBackend::new(path, SIZE).into_drawing_area();
        draw(&root, &p, text)?;
        root.present().map_err(|e| e.to_string())?;
    } else {
        let root = BitMapBackend::new(path, SIZE).into_drawing_area();
        draw(&root, &p, text)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok((!text).then(|| {
        "no TrueType font found (set --font or CRAWLGUARD_FONT): plot drawn without text"
            .to_string()
    }))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    p: &PlotBins,
    text: bool,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let n = p.bins.len() as i64;
    let end_s = p.start_s + n * p.width_s;
    let span_s = end_s - p.start_s;
    let step = tick_step(p.width_s, span_s);
    let root = if text {
        root.titled(
            &format!(
                "crawlguard report: {} .. {} UTC, bins of {}",
                fmt_s(p.start_s),
                fmt_s(end_s),
                width_words(p.width_s)
            ),
            ("sans-serif", 22),
        )
        .map_err(e)?
    } else {
        root.clone()
    };
    let (main, legend) = root.split_horizontally(SIZE.0 - LEGEND_W);
    let (order, panels) = panels(p);
    let h = main.dim_in_pixel().1;
    let (top, rest) = main.split_vertically(h * 40 / 100);
    let (mid, bottom) = rest.split_vertically(h * 30 / 100);
    for (i, (area, panel)) in [&top, &mid, &bottom].into_iter().zip(&panels).enumerate() {
        let last = i == 2;
        let ymax = panel
            .layers
            .last()
            .and_then(|(_, v)| v.iter().max().copied())
            .unwrap_or(0)
            .max(1);
        let ytop = ymax + ymax / 8 + 1;
        let mut b = ChartBuilder::on(area);
        b.margin_left(12)
            .margin_right(40)
            .margin_top(6)
            .set_label_area_size(LabelAreaPosition::Bottom, 0);
        if text {
            b.caption(&panel.title, ("sans-serif", 17))
                .x_label_area_size(if last { 52 } else { 28 })
                .y_label_area_size(64);
        }
        let mut chart = b.build_cartesian_2d(0..n.max(1), 0u64..ytop).map_err(e)?;
        let mut mesh = chart.configure_mesh();
        // Every bin is a key point, labelled only where a tick falls (on a round time, see
        // `tick_step`); the vertical grid lines are drawn there below.
        mesh.disable_x_mesh()
            .light_line_style(RGBColor(238, 238, 238));
        let fmt = |i: &i64| {
            let s = p.start_s + i * p.width_s;
            if s.rem_euclid(step) == 0 {
                tick(s, span_s, p.width_s)
            } else {
                String::new()
            }
        };
        if text {
            mesh.x_labels(n as usize + 1)
                .x_label_formatter(&fmt)
                .y_labels(5)
                .label_style(("sans-serif", 13))
                .axis_desc_style(("sans-serif", 14))
                .y_desc(panel.y_title.as_str());
            if last {
                mesh.x_desc("time (UTC)");
            }
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw().map_err(e)?;
        let grid = (0..=n)
            .filter(|i| (p.start_s + i * p.width_s).rem_euclid(step) == 0)
            .map(|i| PathElement::new(vec![(i, 0), (i, ytop)], RGBColor(200, 200, 200)));
        chart.draw_series(grid).map_err(e)?;
        // Top layer first, each a rectangle per bin from 0 to its cumulative top: the layers
        // below paint over their share.
        for (c, tops) in panel.layers.iter().rev() {
            let col = color(*c).filled();
            chart
                .draw_series(
                    tops.iter()
                        .enumerate()
                        .filter(|(_, v)| **v > 0)
                        .map(|(k, v)| {
                            let k = k as i64;
                            Rectangle::new([(k, 0), (k + 1, *v)], col)
                        }),
                )
                .map_err(e)?;
        }
        if let Some((_, v)) = &panel.line {
            // One step line per run of bins with a count: no line along the zero axis.
            let mut runs: Vec<Vec<(i64, u64)>> = Vec::new();
            let mut prev = 0u64;
            for (k, y) in v.iter().enumerate() {
                let k = k as i64;
                match (prev > 0, *y > 0, runs.last_mut()) {
                    (true, _, Some(r)) => r.extend([(k, prev), (k, *y)]),
                    (false, true, _) => runs.push(vec![(k, 0), (k, *y)]),
                    _ => {}
                }
                prev = *y;
            }
            if let (true, Some(r)) = (prev > 0, runs.last_mut()) {
                r.extend([(n, prev), (n, 0)]);
            }
            for r in runs {
                chart
                    .draw_series(std::iter::once(PathElement::new(r, BLACK.stroke_width(2))))
                    .map_err(e)?;
            }
        }
        if text && panel.layers.is_empty() {
            let (w, hh) = area.dim_in_pixel();
            area.draw(&Text::new(
                panel.empty_note,
                (w as i32 / 2 - 160, hh as i32 / 2),
                ("sans-serif", 16).into_font().color(&RGBColor(90, 90, 90)),
            ))
            .map_err(e)?;
        }
    }
    if text {
        draw_legend(&legend, &order, panels.iter().any(|p| p.line.is_some())).map_err(e)?;
    }
    Ok(())
}

/// Class colours (top of the stack first, as drawn) and the shed line, beside the panels.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    order: &[Class],
    shed: bool,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let font = ("sans-serif", 14).into_font();
    area.draw(&Text::new("class", (10, 40), font.clone()))?;
    let mut y = 66;
    for c in order.iter().rev() {
        area.draw(&Rectangle::new(
            [(10, y - 9), (28, y + 7)],
            color(*c).filled(),
        ))?;
        area.draw(&Text::new(c.as_str(), (36, y - 7), font.clone()))?;
        y += 24;
    }
    if shed {
        y += 8;
        area.draw(&PathElement::new(
            vec![(10, y), (28, y)],
            BLACK.stroke_width(2),
        ))?;
        area.draw(&Text::new("shed (503)", (36, y - 7), font))?;
    }
    Ok(())
}
