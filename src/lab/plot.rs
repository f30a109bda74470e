//! `--plot FILE.svg`: the swept value against RX Gbit/s (device RX where the run has it, else
//! the flows' payload) and app sys %, each point's mean with `+/- sd` error bars (none for a
//! point of one run, which has no sd) and its run count in its label (`4K (n=3)`), drawn with
//! the `plotters` SVG backend. Text goes into the SVG as text elements (the backend measures
//! it with its built-in estimate, so no system font is read); the viewer picks the face.

use plotters::prelude::*;

use super::plan::Plan;
use super::results::{all_columns, stat, Column, RunRecord, Stat};

/// Width and height of the picture, pixels.
const SIZE: (u32, u32) = (800, 640);

/// The SVG document of the plot.
///
/// Errors: the drawing library's, as text.
pub fn svg(plan: &Plan, records: &[RunRecord]) -> Result<String, String> {
    let cols = all_columns();
    let col = |key: &str| cols.iter().copied().find(|c| c.key == key);
    let dev = col("rx_dev_gbps").ok_or("no rx_dev_gbps column")?;
    let total = col("rx_gbps").ok_or("no rx_gbps column")?;
    let sys = col("app_sys_pct").ok_or("no app_sys_pct column")?;
    let n = plan.points.len();
    // Device RX when any point has it (never mixed with the socket figure in one line).
    let has_dev = (0..n).any(|p| stat(records, p, &dev).is_some());
    let (rx, rx_title) = match has_dev {
        true => (dev, "RX dev Gbit/s (qstats)"),
        false => (total, "RX Gbit/s (flow payload)"),
    };
    let x_desc = match plan.key {
        Some(k) => k.name().to_string(),
        None => "run configuration".into(),
    };
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (top, bottom) = root.split_vertically(SIZE.1 / 2);
        for (area, column, title, colour) in
            [(top, rx, rx_title, BLUE), (bottom, sys, "app sys %", RED)]
        {
            panel(&area, plan, records, &column, title, &x_desc, colour)?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// One panel: `column`'s mean per point with `+/- sd` bars (where a point has more than one
/// run), each point labelled with its n.
fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    plan: &Plan,
    records: &[RunRecord],
    column: &Column,
    title: &str,
    x_desc: &str,
    colour: RGBColor,
) -> Result<(), String> {
    let n = plan.points.len();
    let stats: Vec<(usize, Stat)> = (0..n)
        .filter_map(|p| Some((p, stat(records, p, column)?)))
        .collect();
    let top = stats
        .iter()
        .map(|(_, s)| s.mean + s.sd.unwrap_or(0.0))
        .fold(0.0f64, f64::max);
    let ymax = if top > 0.0 { top * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{title}, mean +/- sd"), ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        // A segmented range of 0..k has the k + 1 segments 0..=k.
        .build_cartesian_2d((0..n.saturating_sub(1)).into_segmented(), 0f64..ymax)
        .map_err(|e| e.to_string())?;
    // Each point's label says over how many runs its mean is taken.
    let label = |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(p) if *p < n => match stats.iter().find(|(q, _)| q == p) {
            Some((_, s)) => format!("{} (n={})", plan.show(*p), s.n),
            None => plan.show(*p),
        },
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(WHITE)
        .label_style(("sans-serif", 16))
        .x_labels(n.max(1))
        .x_label_formatter(&label)
        .x_desc(x_desc)
        .y_desc(title)
        .draw()
        .map_err(|e| e.to_string())?;
    let at = |p: usize| SegmentValue::CenterOf(p);
    chart
        .draw_series(LineSeries::new(
            stats.iter().map(|(p, s)| (at(*p), s.mean)),
            colour.stroke_width(2),
        ))
        .map_err(|e| e.to_string())?;
    // One run has no sd, so no bar.
    chart
        .draw_series(stats.iter().filter_map(|(p, s)| {
            let sd = s.sd?;
            Some(ErrorBar::new_vertical(
                at(*p),
                (s.mean - sd).max(0.0),
                s.mean,
                s.mean + sd,
                colour.stroke_width(2),
                12,
            ))
        }))
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(
            stats
                .iter()
                .map(|(p, s)| Circle::new((at(*p), s.mean), 4, colour.filled())),
        )
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::plan::Sweep;
    use crate::lab::results::{Numbers, Outcome};

    #[test]
    fn the_plot_is_an_svg_with_the_points_and_bars() {
        let plan = Plan::new(
            Some(&Sweep::parse("rx-page-size=4096,16384,65536", 4096).unwrap()),
            2,
        );
        // The 64K point keeps one run (its second left out, as a failed one would be).
        let records: Vec<RunRecord> = plan
            .order()
            .into_iter()
            .filter(|slot| !(slot.point == 2 && slot.run == 1))
            .map(|slot| RunRecord {
                slot,
                outcome: Outcome::Ok,
                numbers: Numbers {
                    rx_dev_gbps: Some(1.0 + slot.point as f64 + 0.1 * f64::from(slot.run)),
                    app_sys: Some(40.0 - 5.0 * slot.point as f64),
                    ..Numbers::default()
                },
                body: None,
                peer: None,
            })
            .collect();
        let svg = svg(&plan, &records).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.trim_end().ends_with("</svg>"));
        for text in [
            "RX dev Gbit/s (qstats), mean +/- sd",
            "app sys %, mean +/- sd",
            "\n4K (n=2)\n",
            "\n16K (n=2)\n",
            "\n64K (n=1)\n",
            "rx-page-size",
        ] {
            assert!(svg.contains(text), "no {text:?} in the plot");
        }
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
        let plain_svg = super::svg(&plan, &plain).unwrap();
        assert!(plain_svg.contains("RX Gbit/s (flow payload), mean +/- sd"));
        assert!(!plain_svg.contains("qstats"));
    }
}
