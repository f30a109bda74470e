//! `--plot FILE.svg` or `FILE.png`: the swept value against RX Gbit/s (device RX where the
//! runs have it, else the flows' payload) and app sys %, each point's mean with `+/- sd`
//! error bars (none for a point of one run, which has no sd) and its run count in its label
//! (`4K (n=3)`), under a caption with the runs per point, their duration and the kernel
//! release; a sweep that stopped early says so in red. The comparison's plot
//! ([`comparison`]) draws the base and the new file as two series per figure.
//!
//! Drawn with `plotters`: its SVG backend, or its bitmap backend encoded as PNG by the `png`
//! crate. Text is drawn (PNG) and measured (SVG) with the font bundled in the binary
//! (`assets/fonts/DejaVuSansMono.ttf`, through `ab_glyph`): no system font is read, so a
//! plot looks the same on every host. Any other extension is refused before the sweep runs.

use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::plan::Plan;
use super::results::{all_columns, stat, Column, RunRecord, Stat};
use crate::summary::sweep::Comparison;

/// Width and height of the picture, pixels.
const SIZE: (u32, u32) = (800, 680);

/// The font every text of a plot is drawn with (DejaVu Sans Mono 2.37; licence in
/// `assets/fonts/LICENSE-DejaVu.txt`).
static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSansMono.ttf");

/// The family name the bundled font is registered under.
const FAMILY: &str = "sans-serif";

/// Registers [`FONT`] as [`FAMILY`] with plotters, once per process.
fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The bundled file is a valid TrueType font (a unit test draws with it).
        let _ = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT);
    });
}

/// The picture's format, from its file name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PlotFormat {
    /// `.svg`.
    Svg,
    /// `.png`.
    Png,
}

impl PlotFormat {
    /// The format `path` names by its extension (`.svg` or `.png`, any case).
    ///
    /// Errors: why not, for the `--plot` refusal.
    pub(crate) fn of(path: &std::path::Path) -> Result<PlotFormat, String> {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("svg") => Ok(PlotFormat::Svg),
            Some("png") => Ok(PlotFormat::Png),
            _ => Err(format!(
                "'{}': a plot is written as SVG (FILE.svg) or PNG (FILE.png); the name says \
                 which",
                path.display()
            )),
        }
    }
}

/// What the caption of a sweep's plot says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Caption {
    /// Runs planned per point.
    pub runs: u32,
    /// Each run's duration, seconds.
    pub duration_s: f64,
    /// The kernel release.
    pub kernel: Option<String>,
    /// Why the sweep stopped early, with how many runs it had (`None`: it did not).
    pub stopped: Option<String>,
}

impl Caption {
    fn text(&self) -> String {
        format!(
            "{} per point of {:.1} s; kernel {}",
            crate::figures::count(self.runs, "run"),
            self.duration_s,
            self.kernel.as_deref().unwrap_or("?")
        )
    }
}

/// One series of a panel: its name in the legend, its colour, and a statistic per x slot.
struct Series {
    name: String,
    colour: RGBColor,
    stats: Vec<Option<Stat>>,
}

/// The picture of a sweep in `format`: the bytes of the file.
///
/// Errors: the drawing library's or the encoder's, as text.
pub(crate) fn sweep(
    plan: &Plan,
    records: &[RunRecord],
    caption: &Caption,
    format: PlotFormat,
) -> Result<Vec<u8>, String> {
    let cols = all_columns(&[]);
    let col = |key: &str| {
        cols.iter()
            .find(|c| c.key == key)
            .cloned()
            .ok_or(format!("no {key} column"))
    };
    let (dev, total, sys) = (col("rx_dev_gbps")?, col("rx_gbps")?, col("app_sys_pct")?);
    let n = plan.points.len();
    // Device RX when any point has it (never mixed with the socket figure in one line).
    let has_dev = (0..n).any(|p| stat(records, p, &dev).is_some());
    let (rx, rx_title) = match has_dev {
        true => (dev, "RX dev Gbit/s (qstats)"),
        false => (total, "RX Gbit/s (flow payload)"),
    };
    let x_desc = plan
        .key
        .map_or("run configuration".to_string(), |k| k.name().to_string());
    let labels: Vec<String> = (0..n).map(|p| plan.show(p)).collect();
    let one = |c: &Column, colour: RGBColor| Series {
        name: String::new(),
        colour,
        stats: (0..n).map(|p| stat(records, p, c)).collect(),
    };
    let panels = vec![
        (rx_title.to_string(), vec![one(&rx, BLUE)]),
        ("app sys %".to_string(), vec![one(&sys, RED)]),
    ];
    let title = format!(
        "{}: {}",
        plan.key.map_or("repeated runs".to_string(), |k| format!(
            "{} sweep",
            k.name()
        )),
        caption.text()
    );
    render(
        format,
        &title,
        caption.stopped.as_deref(),
        &labels,
        &x_desc,
        &panels,
    )
}

/// The picture of a comparison in `format`: per figure with data on both sides (RX, app
/// sys %, frags/GiB, completions/GiB), the base and the new file as two series over the
/// matched points; a point whose difference is significant at 5 % is marked `*` in its label.
///
/// Errors: the drawing library's or the encoder's, as text.
pub(crate) fn comparison(c: &Comparison, format: PlotFormat) -> Result<Vec<u8>, String> {
    let labels: Vec<String> = c
        .rows
        .iter()
        .map(|r| match r.base_point == r.new_point {
            true => r.base_point.clone(),
            false => format!("{}->{}", r.base_point, r.new_point),
        })
        .collect();
    let mut panels = Vec::new();
    let rx_key = match c.rows.iter().any(|r| {
        r.cells
            .iter()
            .any(|cell| cell.key == "rx_dev_gbps" && cell.base.is_some())
    }) {
        true => "rx_dev_gbps",
        false => "rx_gbps",
    };
    for key in [
        rx_key,
        "app_sys_pct",
        "frags_per_gib",
        "completions_per_gib",
    ] {
        let cells: Vec<_> = c
            .rows
            .iter()
            .map(|r| r.cells.iter().find(|cell| cell.key == key))
            .collect();
        if !cells
            .iter()
            .any(|cell| cell.is_some_and(|x| x.base.is_some() && x.new.is_some()))
        {
            continue;
        }
        let name = cells
            .iter()
            .flatten()
            .next()
            .map_or(key.to_string(), |cell| cell.name.clone());
        let significant: Vec<usize> = (0..cells.len())
            .filter(|&i| cells[i].is_some_and(|x| x.significant))
            .collect();
        let title = match significant.is_empty() {
            true => name,
            false => format!("{name} (* p < {})", c.alpha),
        };
        panels.push((
            title,
            vec![
                Series {
                    name: "base".into(),
                    colour: BLUE,
                    stats: cells.iter().map(|x| x.and_then(|x| x.base)).collect(),
                },
                Series {
                    name: "new".into(),
                    colour: RGBColor(230, 120, 0),
                    stats: cells.iter().map(|x| x.and_then(|x| x.new)).collect(),
                },
            ],
        ));
        if panels.len() == 3 {
            break;
        }
    }
    if panels.is_empty() {
        return Err("no figure has values on both sides".into());
    }
    let labels: Vec<String> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let sig = c.rows[i].cells.iter().any(|x| x.significant);
            format!("{l}{}", if sig { " *" } else { "" })
        })
        .collect();
    // The files' names, not their paths: a title wider than the picture is cut off.
    let name = |p: &str| {
        std::path::Path::new(p)
            .file_name()
            .map_or(p.to_string(), |n| n.to_string_lossy().into_owned())
    };
    let title = format!(
        "{} (base) against {}",
        name(&c.base),
        c.new.as_deref().map_or("this sweep".into(), name)
    );
    render(format, &title, None, &labels, "point", &panels)
}

/// Draws `panels` (one above the other) under `title` (and `stopped` in red) in `format`.
fn render(
    format: PlotFormat,
    title: &str,
    stopped: Option<&str>,
    labels: &[String],
    x_desc: &str,
    panels: &[(String, Vec<Series>)],
) -> Result<Vec<u8>, String> {
    register_font();
    match format {
        PlotFormat::Svg => {
            let mut out = String::new();
            {
                let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
                draw(&root, title, stopped, labels, x_desc, panels)?;
                root.present().map_err(|e| e.to_string())?;
            }
            Ok(out.into_bytes())
        }
        PlotFormat::Png => {
            let mut rgb = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area();
                draw(&root, title, stopped, labels, x_desc, panels)?;
                root.present().map_err(|e| e.to_string())?;
            }
            encode_png(&rgb, SIZE)
        }
    }
}

/// `rgb` (8-bit RGB rows) of `size` as a PNG file.
fn encode_png(rgb: &[u8], size: (u32, u32)) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, size.0, size.1);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().map_err(|e| e.to_string())?;
        w.write_image_data(rgb).map_err(|e| e.to_string())?;
        w.finish().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    stopped: Option<&str>,
    labels: &[String],
    x_desc: &str,
    panels: &[(String, Vec<Series>)],
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let mut area = root.titled(title, (FAMILY, 16)).map_err(err)?;
    if let Some(why) = stopped {
        let style = TextStyle::from((FAMILY, 15).into_font()).color(&RED);
        area.draw_text(&format!("STOPPED: {why}"), &style, (10, 0))
            .map_err(err)?;
        area = area.margin(20, 0, 0, 0);
    }
    let parts = area.split_evenly((panels.len().max(1), 1));
    for (part, (title, series)) in parts.iter().zip(panels) {
        panel(part, labels, series, title, x_desc)?;
    }
    Ok(())
}

/// One panel: each series' mean per point with `+/- sd` bars (where a point has more than
/// one run), each point labelled with its n (the first series').
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    labels: &[String],
    series: &[Series],
    title: &str,
    x_desc: &str,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let n = labels.len();
    let top = series
        .iter()
        .flat_map(|s| s.stats.iter().flatten())
        .map(|s| s.mean + s.sd.unwrap_or(0.0))
        .fold(0.0f64, f64::max);
    let ymax = if top > 0.0 { top * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{title}, mean +/- sd"), (FAMILY, 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        // A segmented range of 0..k has the k + 1 segments 0..=k.
        .build_cartesian_2d((0..n.saturating_sub(1)).into_segmented(), 0f64..ymax)
        .map_err(err)?;
    // Each point's label says over how many runs its mean is taken (the first series').
    let first = series.first();
    let label = |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(p) if *p < n => match first.and_then(|s| s.stats[*p]) {
            Some(s) if series.len() == 1 => format!("{} (n={})", labels[*p], s.n),
            _ => labels[*p].clone(),
        },
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(WHITE)
        .label_style((FAMILY, 14))
        .x_labels(n.max(1))
        .x_label_formatter(&label)
        .x_desc(x_desc)
        .draw()
        .map_err(err)?;
    let at = |p: usize| SegmentValue::CenterOf(p);
    for s in series {
        let points: Vec<(usize, Stat)> = s
            .stats
            .iter()
            .enumerate()
            .filter_map(|(p, st)| Some((p, (*st)?)))
            .collect();
        let line = chart
            .draw_series(LineSeries::new(
                points.iter().map(|(p, st)| (at(*p), st.mean)),
                s.colour.stroke_width(2),
            ))
            .map_err(err)?;
        if !s.name.is_empty() {
            let colour = s.colour;
            line.label(s.name.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour));
        }
        // One run has no sd, so no bar.
        chart
            .draw_series(points.iter().filter_map(|(p, st)| {
                let sd = st.sd?;
                Some(ErrorBar::new_vertical(
                    at(*p),
                    (st.mean - sd).max(0.0),
                    st.mean,
                    st.mean + sd,
                    s.colour.stroke_width(2),
                    12,
                ))
            }))
            .map_err(err)?;
        chart
            .draw_series(
                points
                    .iter()
                    .map(|(p, st)| Circle::new((at(*p), st.mean), 4, s.colour.filled())),
            )
            .map_err(err)?;
    }
    if series.iter().any(|s| !s.name.is_empty()) {
        chart
            .configure_series_labels()
            .label_font((FAMILY, 14))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::plan::Sweep;
    use crate::lab::results::{Numbers, Outcome};

    fn records(plan: &Plan) -> Vec<RunRecord> {
        // The 64K point keeps one run (its second left out, as a failed one would be).
        plan.order()
            .into_iter()
            .filter(|slot| !(slot.point == 2 && slot.run == 1))
            .map(|slot| {
                RunRecord::new(
                    slot,
                    Outcome::Ok,
                    Numbers {
                        rx_dev_gbps: Some(1.0 + slot.point as f64 + 0.1 * f64::from(slot.run)),
                        app_sys_pct: Some(40.0 - 5.0 * slot.point as f64),
                        ..Numbers::default()
                    },
                )
            })
            .collect()
    }

    fn caption() -> Caption {
        Caption {
            runs: 2,
            duration_s: 3.0,
            kernel: Some("7.3.0-test".into()),
            stopped: None,
        }
    }

    #[test]
    fn the_plot_is_an_svg_with_the_points_and_bars() {
        let plan = Plan::new(
            Some(&Sweep::parse("rx-page-size=4096,16384,65536", 4096).unwrap()),
            2,
        );
        let records = records(&plan);
        let svg = String::from_utf8(sweep(&plan, &records, &caption(), PlotFormat::Svg).unwrap())
            .unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.trim_end().ends_with("</svg>"));
        for text in [
            "RX dev Gbit/s (qstats), mean +/- sd",
            "app sys %, mean +/- sd",
            "\n4K (n=2)\n",
            "\n16K (n=2)\n",
            "\n64K (n=1)\n",
            "rx-page-size",
            "2 runs per point of 3.0 s; kernel 7.3.0-test",
        ] {
            assert!(svg.contains(text), "no {text:?} in the plot");
        }
        assert!(!svg.contains("STOPPED"));
        // Three points per panel, a filled circle each; an error bar (three lines and a
        // hollow circle at the mean, in the panel's colour) for each point of two runs, none
        // for the point of one run, which has no sd (before: a bar of +/- 0 there too).
        for colour in ["#0000FF", "#FF0000"] {
            let point = format!("r=\"4\" opacity=\"1\" fill=\"{colour}\"");
            assert_eq!(svg.matches(&point).count(), 3, "{colour}: {svg}");
            let bar_line = format!("<line opacity=\"1\" stroke=\"{colour}\" stroke-width=\"2\"");
            assert_eq!(svg.matches(&bar_line).count(), 2 * 3, "{colour}: {svg}");
            let bar_mark = format!("r=\"6\" opacity=\"1\" fill=\"none\" stroke=\"{colour}\"");
            assert_eq!(svg.matches(&bar_mark).count(), 2, "{colour}: {svg}");
        }
        // Without device figures the RX panel says it shows the payload.
        let plain: Vec<RunRecord> = records
            .iter()
            .cloned()
            .map(|mut r| {
                r.numbers.rx_gbps = r.numbers.rx_dev_gbps.take();
                r
            })
            .collect();
        let plain_svg =
            String::from_utf8(sweep(&plan, &plain, &caption(), PlotFormat::Svg).unwrap()).unwrap();
        assert!(plain_svg.contains("RX Gbit/s (flow payload), mean +/- sd"));
        assert!(!plain_svg.contains("qstats"));
        // A stopped sweep says so.
        let stopped = Caption {
            stopped: Some("after 5 of 6 runs: the peer closed".into()),
            ..caption()
        };
        let s =
            String::from_utf8(sweep(&plan, &records, &stopped, PlotFormat::Svg).unwrap()).unwrap();
        assert!(
            s.contains("STOPPED: after 5 of 6 runs: the peer closed"),
            "{s}"
        );
    }

    /// A PNG plot is a PNG (never SVG bytes under a .png name): it decodes to a picture of
    /// the plot's size with more than one colour, drawn with the bundled font.
    #[test]
    fn the_png_decodes_to_a_non_empty_image() {
        let plan = Plan::new(Some(&Sweep::parse("flows=1,2,4", 4096).unwrap()), 2);
        let bytes = sweep(&plan, &records(&plan), &caption(), PlotFormat::Png).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
        let decoder = png::Decoder::new(std::io::Cursor::new(&bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), SIZE);
        let pixels = &buf[..info.buffer_size()];
        let white = pixels.chunks(3).filter(|p| p == &[255, 255, 255]).count();
        let dark = pixels
            .chunks(3)
            .filter(|p| p.iter().all(|&c| c < 80))
            .count();
        let total = pixels.len() / 3;
        assert!(white > total / 2, "mostly background: {white} of {total}");
        assert!(dark > 500, "text and axes drawn: {dark} dark pixels");
    }

    #[test]
    fn the_format_comes_from_the_name() {
        use std::path::Path;
        assert_eq!(PlotFormat::of(Path::new("a.svg")), Ok(PlotFormat::Svg));
        assert_eq!(PlotFormat::of(Path::new("a/b.PNG")), Ok(PlotFormat::Png));
        assert_eq!(
            PlotFormat::of(Path::new("x.jpg")),
            Err(
                "'x.jpg': a plot is written as SVG (FILE.svg) or PNG (FILE.png); the name \
                 says which"
                    .to_string()
            )
        );
        assert!(PlotFormat::of(Path::new("plot")).is_err());
    }
}
