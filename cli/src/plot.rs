//! `report --plot FILE.svg|png`: requests (top) and rejections, 429 + 503 (bottom), per
//! class over time, one point per minute (or per N minutes for long logs, so a plot has at
//! most about 1,500 points per line).
//!
//! Text needs a TrueType font (plotters draws glyphs itself): `--font`, `$CRAWLGUARD_FONT`,
//! or a common system font (DejaVu Sans, Liberation Sans, Arial). Without one the plot is
//! drawn without text and a note says so.

use crate::report::Minute;
use crawlguard::classify::Class;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Size of the picture, pixels.
pub const SIZE: (u32, u32) = (1400, 800);

/// Most points per line.
const MAX_POINTS: i64 = 1500;

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

/// Binned series: (bin start minute, requests per class, rejections per class).
type Series = Vec<(i64, [u64; 8], [u64; 8])>;

fn bin(minutes: &BTreeMap<i64, Minute>) -> (i64, Series) {
    let (Some(first), Some(last)) = (minutes.keys().next(), minutes.keys().next_back()) else {
        return (1, Vec::new());
    };
    let span = last - first + 1;
    let width = ((span + MAX_POINTS - 1) / MAX_POINTS).max(1);
    let mut out: Series = Vec::new();
    let mut t = *first;
    while t <= *last {
        let mut req = [0u64; 8];
        let mut rej = [0u64; 8];
        for (_, m) in minutes.range(t..t + width) {
            for (a, b) in req.iter_mut().zip(m.requests) {
                *a += u64::from(b);
            }
            for (a, b) in rej.iter_mut().zip(m.rejected) {
                *a += u64::from(b);
            }
        }
        out.push((t, req, rej));
        t += width;
    }
    (width, out)
}

/// Writes the plot to `path` (`.svg` or `.png`); returns a note when drawn without text.
pub fn plot(
    path: &Path,
    minutes: &BTreeMap<i64, Minute>,
    font: Option<&Path>,
) -> Result<Option<String>, String> {
    let font_path = load_font(font);
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let text = font_path.is_some();
    match ext.as_str() {
        "svg" => {
            let root = SVGBackend::new(path, SIZE).into_drawing_area();
            draw(&root, minutes, text)?;
            root.present().map_err(|e| e.to_string())?;
        }
        "png" => {
            let root = BitMapBackend::new(path, SIZE).into_drawing_area();
            draw(&root, minutes, text)?;
            root.present().map_err(|e| e.to_string())?;
        }
        _ => {
            return Err(format!(
                "{}: the plot file must end in .svg or .png",
                path.display()
            ))
        }
    }
    Ok((!text).then(|| {
        "no TrueType font found (set --font or CRAWLGUARD_FONT): plot drawn without text"
            .to_string()
    }))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    minutes: &BTreeMap<i64, Minute>,
    text: bool,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let (width, series) = bin(minutes);
    let classes: Vec<Class> = Class::ALL
        .into_iter()
        .filter(|c| {
            series
                .iter()
                .any(|(_, r, _)| r.get(c.index()).is_some_and(|v| *v > 0))
        })
        .collect();
    let (x0, x1) = match (series.first(), series.last()) {
        (Some(a), Some(b)) => (a.0, b.0 + width),
        _ => (0, 1),
    };
    let unit = if width == 1 {
        "per minute".to_string()
    } else {
        format!("per {width} minutes")
    };
    let (top, bottom) = root.split_vertically(SIZE.1 * 55 / 100);
    for (area, rejections) in [(&top, false), (&bottom, true)] {
        let pick = |r: &[u64; 8], j: &[u64; 8], c: Class| {
            if rejections {
                j.get(c.index()).copied().unwrap_or(0)
            } else {
                r.get(c.index()).copied().unwrap_or(0)
            }
        };
        let ymax = series
            .iter()
            .flat_map(|(_, r, j)| classes.iter().map(move |c| pick(r, j, *c)))
            .max()
            .unwrap_or(0)
            .max(1);
        let mut b = ChartBuilder::on(area);
        b.margin(12);
        if text {
            let title = if rejections {
                format!("rejections (429 + 503) {unit}, by class")
            } else {
                format!("requests {unit}, by class")
            };
            b.caption(title, ("sans-serif", 20))
                .x_label_area_size(36)
                .y_label_area_size(60);
        }
        let mut chart = b
            .build_cartesian_2d(x0..x1, 0u64..(ymax + ymax / 10 + 1))
            .map_err(e)?;
        let mut mesh = chart.configure_mesh();
        mesh.light_line_style(RGBColor(235, 235, 235));
        if text {
            mesh.x_labels(8)
                .x_label_formatter(&|m| crate::time::fmt_minute(*m))
                .label_style(("sans-serif", 13));
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw().map_err(e)?;
        for c in &classes {
            let col = color(*c);
            let line = LineSeries::new(
                series.iter().map(|(t, r, j)| (*t, pick(r, j, *c))),
                col.stroke_width(2),
            );
            let s = chart.draw_series(line).map_err(e)?;
            if text {
                s.label(c.as_str()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(3))
                });
            }
        }
        if text && !classes.is_empty() {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.3))
                .label_font(("sans-serif", 13))
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(e)?;
        }
    }
    Ok(())
}
