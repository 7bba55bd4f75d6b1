//! SVG plots comparing two runs side by side, like the paper's Fig. 8 to 11.

use std::path::Path;

use plotters::prelude::*;

use crate::engine::SimResult;
use crate::SimError;

fn failed(e: impl std::fmt::Display) -> SimError {
    SimError::Plot(e.to_string())
}

/// Busy units over time of one or more runs, one panel each, side by side.
pub fn utilisation(runs: &[(&str, &SimResult)], path: &Path) -> Result<(), SimError> {
    let root = SVGBackend::new(path, (600 * runs.len().max(1) as u32, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(failed)?;
    let end = runs.iter().filter_map(|(_, r)| r.busy.last().map(|b| b.0)).max().unwrap_or(1) as f64 / 60.0;
    let units = runs.iter().map(|(_, r)| r.units).max().unwrap_or(1) as f64;
    for ((name, run), area) in runs.iter().zip(root.split_evenly((1, runs.len().max(1))).iter()) {
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{name}: busy units"), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(44)
            .build_cartesian_2d(0f64..end.max(1.0), 0f64..units * 1.05)
            .map_err(failed)?;
        chart.configure_mesh().x_desc("time [min]").y_desc("units").draw().map_err(failed)?;
        // A step line: hold each value until the next change.
        let steps = run.busy.windows(2).flat_map(|w| {
            let (t0, b) = (w[0].0 as f64 / 60.0, f64::from(w[0].1));
            [(t0, b), (w[1].0 as f64 / 60.0, b)]
        });
        chart.draw_series(LineSeries::new(steps, &BLUE)).map_err(failed)?;
    }
    root.present().map_err(failed)
}

/// Waiting time of each job, in submission order, of two runs on one chart.
pub fn waits(runs: [(&str, &SimResult); 2], only_kind: Option<&str>, path: &Path) -> Result<(), SimError> {
    let root = SVGBackend::new(path, (1000, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(failed)?;
    let series = |r: &SimResult| -> Vec<(f64, f64)> {
        let mut jobs: Vec<_> =
            r.jobs.iter().filter(|j| only_kind.is_none_or(|k| j.kind == k)).filter(|j| j.start.is_some()).collect();
        jobs.sort_by_key(|j| (j.submit, j.id));
        jobs.iter().enumerate().map(|(i, j)| (i as f64 + 1.0, j.wait().unwrap_or(0) as f64 / 60.0)).collect()
    };
    let data: Vec<Vec<(f64, f64)>> = runs.iter().map(|(_, r)| series(r)).collect();
    let n = data.iter().map(|d| d.len()).max().unwrap_or(1) as f64;
    let top = data.iter().flatten().map(|p| p.1).fold(1.0, f64::max);
    let what = only_kind.map(|k| format!("type {k} jobs")).unwrap_or_else(|| "jobs".into());
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("Waiting time of {what}: {} vs {}", runs[0].0, runs[1].0), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(0f64..n + 1.0, 0f64..top * 1.05)
        .map_err(failed)?;
    chart.configure_mesh().x_desc("job, in submission order").y_desc("wait [min]").draw().map_err(failed)?;
    for ((name, _), (points, color)) in runs.iter().zip(data.into_iter().zip([BLUE, RED])) {
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(1)))
            .map_err(failed)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 2, color.filled()))).map_err(failed)?;
    }
    chart.configure_series_labels().background_style(WHITE).border_style(BLACK).draw().map_err(failed)?;
    root.present().map_err(failed)
}
