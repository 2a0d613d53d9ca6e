//! Pictures of embedding spaces: principal component analysis and scatter plots in PNG
//! (`xsent plot pca`), drawn with `plotters` and the bundled DejaVu Sans font.

use anyhow::{anyhow, bail, ensure, Context, Result};
use plotters::prelude::*;
use std::path::Path;

/// The first `k` principal components of `rows` (all of one dimension): each row projected on
/// them, and the share of the total variance each explains.
#[derive(Debug, Clone)]
pub struct Pca {
    /// `[rows][k]` coordinates.
    pub coords: Vec<Vec<f64>>,
    /// Explained variance ratio of each component, largest first.
    pub explained: Vec<f64>,
}

/// Principal components by the eigendecomposition of the covariance matrix. Each component's
/// sign is fixed so that its largest-magnitude loading is positive (deterministic pictures).
pub fn pca(rows: &[Vec<f32>], k: usize) -> Result<Pca> {
    use nalgebra::{DMatrix, SymmetricEigen};
    let n = rows.len();
    ensure!(n >= 2, "PCA needs at least 2 vectors, got {n}");
    let d = rows[0].len();
    ensure!(d >= k && k >= 1, "cannot take {k} components of {d}-dimensional vectors");
    ensure!(rows.iter().all(|r| r.len() == d), "PCA: the vectors do not all have {d} dimensions");
    let mut mean = vec![0f64; d];
    for r in rows {
        for (m, &x) in mean.iter_mut().zip(r) {
            *m += x as f64 / n as f64;
        }
    }
    let x = DMatrix::from_fn(n, d, |i, j| rows[i][j] as f64 - mean[j]);
    let cov = (x.transpose() * &x) / (n as f64 - 1.0);
    let eig = SymmetricEigen::new(cov);
    let total: f64 = eig.eigenvalues.iter().map(|v| v.max(0.0)).sum();
    // Vectors all the same, up to rounding, have no direction to show (an outside probe: two
    // copies of one sentence were drawn as one dot titled "PC1 100%, PC2 0%").
    let square: f64 = rows.iter().flatten().map(|&v| v as f64 * v as f64).sum::<f64>() / n as f64;
    ensure!(
        total > 1e-9 * square,
        "PCA: the {n} vectors are all the same (up to rounding), so they have no direction to show: give different sentences"
    );
    let mut order: Vec<usize> = (0..d).collect();
    order.sort_by(|&a, &b| eig.eigenvalues[b].total_cmp(&eig.eigenvalues[a]));
    let mut comps = Vec::with_capacity(k);
    let mut explained = Vec::with_capacity(k);
    for &c in &order[..k] {
        let mut v: Vec<f64> = eig.eigenvectors.column(c).iter().copied().collect();
        let big = v.iter().copied().max_by(|a, b| a.abs().total_cmp(&b.abs())).unwrap_or(0.0);
        if big < 0.0 {
            v.iter_mut().for_each(|x| *x = -*x);
        }
        comps.push(v);
        explained.push(if total > 0.0 { eig.eigenvalues[c].max(0.0) / total } else { 0.0 });
    }
    let coords =
        (0..n).map(|i| comps.iter().map(|v| x.row(i).iter().zip(v).map(|(a, b)| a * b).sum()).collect()).collect();
    Ok(Pca { coords, explained })
}

/// One scatter panel: points with a group label each.
pub struct Panel {
    pub title: String,
    /// `(x, y, group index)`.
    pub points: Vec<(f64, f64, usize)>,
}

/// How many groups (languages) a picture can tell apart by colour.
const MAX_GROUPS: usize = 20;

/// Refuses more groups than the palette tells apart (the CLI calls it before embedding anything).
pub fn check_groups(n: usize) -> Result<()> {
    ensure!(
        n <= MAX_GROUPS,
        "{n} languages, but at most {MAX_GROUPS} can be told apart by colour; give fewer with --langs or --input"
    );
    Ok(())
}

/// A qualitative palette (Tableau 20, dark shades first): distinct colours for up to 20 groups.
const PALETTE: [(u8, u8, u8); MAX_GROUPS] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
    (174, 199, 232),
    (255, 187, 120),
    (152, 223, 138),
    (255, 152, 150),
    (197, 176, 213),
    (196, 156, 148),
    (247, 182, 210),
    (199, 199, 199),
    (219, 219, 141),
    (158, 218, 229),
];

fn register_font() -> Result<()> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            include_bytes!("../assets/fonts/DejaVuSans.ttf"),
        )
        .is_ok()
    });
    ensure!(ok, "the bundled font assets/fonts/DejaVuSans.ttf could not be read");
    Ok(())
}

/// Draw panels side by side into a PNG of `panel_px` × `panel_px` pixels per panel, with one
/// legend of the group names.
pub fn scatter_png(path: &Path, panels: &[Panel], groups: &[String], panel_px: u32) -> Result<()> {
    ensure!(!panels.is_empty(), "nothing to plot");
    check_groups(groups.len())?;
    register_font()?;
    let width = panel_px * panels.len() as u32;
    let legend_h = 30 + 22 * groups.len().div_ceil(legend_columns(width)) as u32;
    let size = (width, panel_px + legend_h);
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = BitMapBackend::new(path, size).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, legend) = root.split_vertically(panel_px);
        for (area, panel) in top.split_evenly((1, panels.len())).iter().zip(panels) {
            let (x0, x1) = bounds(&panel.title, "PC1 coordinates", panel.points.iter().map(|p| p.0))?;
            let (y0, y1) = bounds(&panel.title, "PC2 coordinates", panel.points.iter().map(|p| p.1))?;
            let mut chart = ChartBuilder::on(area)
                .caption(&panel.title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(30)
                .y_label_area_size(45)
                .build_cartesian_2d(x0..x1, y0..y1)?;
            chart
                .configure_mesh()
                .light_line_style(WHITE)
                .x_desc("PC1")
                .y_desc("PC2")
                .x_label_formatter(&|v| tick_label(*v))
                .y_label_formatter(&|v| tick_label(*v))
                .label_style(("sans-serif", 12))
                .draw()?;
            chart.draw_series(panel.points.iter().map(|&(x, y, g)| {
                let (r, gr, b) = PALETTE[g % PALETTE.len()];
                Circle::new((x, y), 3, RGBColor(r, gr, b).mix(0.7).filled())
            }))?;
        }
        for (i, (cx, cy, label)) in legend_entries(groups, size.0).into_iter().enumerate() {
            let (r, g, b) = PALETTE[i];
            legend.draw(&Circle::new((cx, cy + 7), 6, RGBColor(r, g, b).filled()))?;
            legend.draw(&Text::new(label, (cx + 12, cy), ("sans-serif", 16)))?;
        }
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow!("cannot draw {}: {e}", path.display()))?;
    Ok(())
}

/// The range of values with a 5% margin (a unit range around a single value); an error naming
/// `what` and the axis at fault (`axis`: "steps", "values", "PC1 coordinates") where the range is
/// wider than float64 can hold (±1e308: plotters never ends on it).
fn bounds(what: &str, axis: &str, values: impl Iterator<Item = f64>) -> std::result::Result<(f64, f64), String> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() || !hi.is_finite() {
        return Ok((-1.0, 1.0));
    }
    let pad = ((hi - lo) * 0.05).max(1e-6);
    let (a, b) = (lo - pad, hi + pad);
    if !(b - a).is_finite() {
        return Err(format!("{what}: its {axis}, from {lo:e} to {hi:e}, lie too far apart to draw"));
    }
    Ok((a, b))
}

/// A tick label as plotters writes it, without the sign of a zero (`-0.0`: a key point a
/// rounding error below 0).
fn tick_label(v: f64) -> String {
    use plotters::coord::ranged1d::ValueFormatter;
    no_negative_zero(<plotters::coord::types::RangedCoordf64 as ValueFormatter<f64>>::format(&v))
}

/// `-0`, `-0.0`, `-0.00`… as `0`, `0.0`, `0.00`…; other labels as they are.
fn no_negative_zero(label: String) -> String {
    match label.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => label,
    }
}

/// Columns of the scatter legend in a picture `width` pixels wide: one per 100 pixels, 1 to 8.
fn legend_columns(width: u32) -> usize {
    ((width / 100) as usize).clamp(1, 8)
}

/// Where each legend entry of a scatter picture `width` pixels wide goes: the centre of its
/// dot's row (x, y) and its label, cut with an ellipsis to the width its column leaves (a label
/// of 300 characters drew over the next entries and off the picture: an outside probe).
fn legend_entries(groups: &[String], width: u32) -> Vec<(i32, i32, String)> {
    let cols = legend_columns(width);
    let col_w = width as i32 / cols as i32;
    // The label starts 12 pixels right of its dot's centre, 32 into its column; it must end
    // before the next column's dot (14 into it) and, in the last column, 4 pixels inside the
    // picture: 36 pixels of each column are not the label's.
    let room = (col_w - 36).max(0) as u32;
    groups
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let (cx, cy) = ((i % cols) as i32 * col_w + 20, 15 + (i / cols) as i32 * 22);
            (cx, cy, fit_label(name, room))
        })
        .collect()
}

/// The width in pixels of `text` in the legend's font (16-pixel DejaVu Sans); an estimate of
/// 10 pixels a character where the font cannot measure it.
fn label_width(text: &str) -> u32 {
    let estimate = 10 * text.chars().count() as u32;
    if register_font().is_err() {
        return estimate;
    }
    ("sans-serif", 16).into_font().box_size(text).map_or(estimate, |(w, _)| w)
}

/// `label` as it is where it fits in `room` pixels, else its longest beginning that fits with
/// an ellipsis after it (`…` alone where nothing more does).
pub fn fit_label(label: &str, room: u32) -> String {
    if label_width(label) <= room {
        return label.to_string();
    }
    let chars: Vec<char> = label.chars().collect();
    let cut = |k: usize| format!("{}…", chars[..k].iter().collect::<String>());
    // The longest k whose cut fits: widths grow with k.
    let (mut lo, mut hi) = (0usize, chars.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if label_width(&cut(mid)) <= room {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    cut(lo)
}

/// Sentences labelled by language, from `LANG=FILE` specs (one sentence per line, at most
/// `limit` lines each; `.gz` files are read too).
pub fn read_labelled(specs: &[String], limit: usize) -> Result<Vec<(String, Vec<String>)>> {
    let mut out = Vec::new();
    for spec in specs {
        let Some((lang, file)) = spec.split_once('=') else {
            bail!("--input {spec:?}: expected LANG=FILE, e.g. --input de=sentences.de.txt");
        };
        ensure!(
            !lang.trim().is_empty(),
            "--input {spec:?}: the language label before '=' is empty; it names the colour in the legend: \
             give LANG=FILE, e.g. --input de={file}"
        );
        ensure!(
            !out.iter().any(|(l, _): &(String, Vec<String>)| l == lang),
            "--input {spec}: the language {lang} is given twice; give each language one file (one colour)"
        );
        let (mut lines, blank) = crate::data::drop_blank(
            crate::data::read_lines(Path::new(file)).with_context(|| format!("--input {spec}"))?,
        );
        if blank > 0 {
            errln!("xsent plot: {blank} blank lines of {file} left out");
        }
        lines.truncate(limit);
        ensure!(!lines.is_empty(), "--input {spec}: {file} has no sentences (no lines that are not blank)");
        out.push((lang.to_string(), lines));
    }
    Ok(out)
}

/// One panel of curves: a metric over steps, one line per run.
pub struct Curves {
    pub title: String,
    /// Per run: `(step, value)` points in step order.
    pub lines: Vec<Vec<(f64, f64)>>,
    /// Per run: the step the run kept as its best model and its value there, if this panel's
    /// metric is the one that chose it.
    pub best: Vec<Option<(f64, f64)>>,
}

/// The training curves of run directories: `loss` from the step lines of each `metrics.jsonl`,
/// and every validation metric from its `"val"` lines (`only`: just these metrics, by name);
/// a run's best step (its `best/xsent-best.json`) is marked on its metric's panel.
pub fn run_curves(runs: &[std::path::PathBuf], only: &[String]) -> Result<Vec<Curves>> {
    let mut names: Vec<String> = Vec::new();
    let mut per_run: Vec<std::collections::HashMap<String, Vec<(f64, f64)>>> = Vec::new();
    let mut bests: Vec<Option<(String, f64)>> = Vec::new();
    for run in runs {
        let path = run.join("metrics.jsonl");
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!("cannot read {} (is {} a run directory of xsent train?)", path.display(), run.display())
        })?;
        let mut series: std::collections::HashMap<String, Vec<(f64, f64)>> = std::collections::HashMap::new();
        let mut push = |name: &str, step: f64, v: &serde_json::Value| {
            if let Some(v) = v.as_f64().filter(|v| v.is_finite()) {
                if !series.contains_key(name) && !names.iter().any(|n| n == name) {
                    names.push(name.to_string());
                }
                series.entry(name.to_string()).or_default().push((step, v));
            }
        };
        let (records, note) = metrics_records(&path, &text)?;
        if let Some(note) = note {
            errln!("xsent plot: {note}");
        }
        for v in records {
            let Some(step) = v["step"].as_f64() else { continue };
            if let Some(val) = v["val"].as_object() {
                for (k, x) in val {
                    push(k, step, x);
                }
            } else if v.get("loss").is_some() {
                push("loss", step, &v["loss"]);
            }
        }
        let best = std::fs::read_to_string(run.join("best/xsent-best.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|b| {
                let step = b["step"].as_f64()?;
                let metric = b.as_object()?.keys().find(|k| *k != "step")?.clone();
                Some((metric, step))
            });
        per_run.push(series);
        bests.push(best);
    }
    // The loss first, then the validation metrics as first logged.
    names.sort_by_key(|n| n != "loss");
    for o in only {
        ensure!(names.contains(o), "--metrics {o}: no run logged it; these did: {}", names.join(", "));
    }
    let chosen: Vec<&String> = names.iter().filter(|n| only.is_empty() || only.contains(n)).collect();
    ensure!(!chosen.is_empty(), "the runs' metrics.jsonl hold no step or validation lines yet");
    Ok(chosen
        .into_iter()
        .map(|name| {
            let lines: Vec<Vec<(f64, f64)>> =
                per_run.iter().map(|s| s.get(name).cloned().unwrap_or_default()).collect();
            let best = bests
                .iter()
                .zip(&lines)
                .map(|(b, line)| {
                    b.as_ref()
                        .filter(|(m, _)| m == name)
                        .and_then(|(_, step)| line.iter().find(|p| p.0 == *step).copied())
                })
                .collect();
            Curves { title: name.clone(), lines, best }
        })
        .collect())
}

/// The JSON records of a `metrics.jsonl` (`path`, read as `text`), and a note on what was left
/// out: blank lines at its end, or a last line that is cut (not JSON and no newline after it,
/// as a run killed while writing it, or a full disk, leaves it), so that such a run still plots.
/// Any other line that is not JSON is an error naming the file and line.
fn metrics_records(path: &Path, text: &str) -> Result<(Vec<serde_json::Value>, Option<String>)> {
    let lines: Vec<&str> = text.lines().collect();
    // Blank lines at the end are left out.
    let mut end = lines.len();
    while end > 0 && lines[end - 1].trim().is_empty() {
        end -= 1;
    }
    let mut note = (end < lines.len()).then(|| {
        let blank = lines.len() - end;
        let which =
            if blank == 1 { format!("line {}", end + 1) } else { format!("lines {} to {}", end + 1, lines.len()) };
        format!("{}: {which} blank at its end, left out", path.display())
    });
    let mut records = Vec::with_capacity(end);
    for (i, line) in lines[..end].iter().enumerate() {
        match serde_json::from_str(line) {
            Ok(v) => records.push(v),
            // The last line, with nothing after it (no newline, no blank lines): cut off.
            Err(e) if i + 1 == lines.len() && !text.ends_with('\n') => {
                note = Some(format!(
                    "{}:{}: the last line is cut off (not JSON: {e}; no newline at its end, as a run stopped while \
                     writing it leaves it), left out",
                    path.display(),
                    i + 1
                ));
            }
            Err(e) => return Err(anyhow!(e).context(format!("{}:{}: not JSON", path.display(), i + 1))),
        }
    }
    Ok((records, note))
}

/// Draw curve panels in a grid of up to three columns, runs coloured alike in every panel, a
/// filled circle at each run's best step, one legend of the run names.
pub fn curves_png(path: &Path, panels: &[Curves], runs: &[String], panel_px: u32) -> Result<()> {
    ensure!(!panels.is_empty(), "nothing to plot");
    check_groups(runs.len())?;
    register_font()?;
    let cols = panels.len().min(3);
    let rows = panels.len().div_ceil(cols);
    let legend_h = 30 + 22 * runs.len().div_ceil(4) as u32;
    let (w, h) = (panel_px * cols as u32, (panel_px * 3 / 4) * rows as u32);
    let draw = || -> std::result::Result<(), Box<dyn std::error::Error>> {
        let root = BitMapBackend::new(path, (w, h + legend_h)).into_drawing_area();
        root.fill(&WHITE)?;
        let (top, legend) = root.split_vertically(h);
        for (area, panel) in top.split_evenly((rows, cols)).iter().zip(panels) {
            let (x0, x1) = bounds(&panel.title, "steps", panel.lines.iter().flatten().map(|p| p.0))?;
            let (y0, y1) = bounds(&panel.title, "values", panel.lines.iter().flatten().map(|p| p.1))?;
            let mut chart = ChartBuilder::on(area)
                .caption(&panel.title, ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(30)
                .y_label_area_size(55)
                .build_cartesian_2d(x0..x1, y0..y1)?;
            chart
                .configure_mesh()
                .light_line_style(WHITE)
                .x_desc("step")
                .x_labels(6)
                .x_label_formatter(&|v| no_negative_zero(format!("{v:.0}")))
                .y_label_formatter(&|v| tick_label(*v))
                .label_style(("sans-serif", 12))
                .draw()?;
            for (i, (line, best)) in panel.lines.iter().zip(&panel.best).enumerate() {
                let (r, g, b) = PALETTE[i % PALETTE.len()];
                let colour = RGBColor(r, g, b);
                chart.draw_series(LineSeries::new(line.iter().copied(), colour.stroke_width(2)))?;
                if line.len() < 30 {
                    chart.draw_series(line.iter().map(|&p| Circle::new(p, 2, colour.filled())))?;
                }
                if let Some(p) = best {
                    chart.draw_series([
                        Circle::new(*p, 7, colour.filled()),
                        Circle::new(*p, 7, BLACK.stroke_width(1)),
                    ])?;
                }
            }
        }
        let per_row = 4usize;
        let col_w = w as i32 / per_row as i32;
        for (i, name) in runs.iter().enumerate() {
            let (r, g, b) = PALETTE[i % PALETTE.len()];
            let (cx, cy) = ((i % per_row) as i32 * col_w + 20, 15 + (i / per_row) as i32 * 22);
            legend.draw(&Rectangle::new([(cx - 6, cy + 5), (cx + 6, cy + 9)], RGBColor(r, g, b).filled()))?;
            legend.draw(&Text::new(name.clone(), (cx + 12, cy), ("sans-serif", 16)))?;
        }
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow!("cannot draw {}: {e}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Points spread along (1, 1, 0) with small noise along (1, -1, 0): PC1 is that direction and
    /// explains almost all the variance.
    #[test]
    fn pca_finds_the_main_axis() {
        let rows: Vec<Vec<f32>> = (0..50)
            .map(|i| {
                let t = i as f32 - 25.0;
                let e = if i % 2 == 0 { 0.1 } else { -0.1 };
                vec![t + e + 3.0, t - e - 1.0, 2.0]
            })
            .collect();
        let p = pca(&rows, 2).unwrap();
        assert!(p.explained[0] > 0.999, "{:?}", p.explained);
        assert!(p.explained[0] >= p.explained[1]);
        // Coordinates on PC1 are t·√2 (centred), sign fixed positive along (1, 1).
        let first = p.coords[0][0];
        let last = p.coords[49][0];
        assert!((last - first - 49.0 * 2f64.sqrt()).abs() < 1e-3, "{first} {last}");
        let mean: f64 = p.coords.iter().map(|c| c[0]).sum::<f64>() / 50.0;
        assert!(mean.abs() < 1e-9);
    }

    #[test]
    fn pca_rejects_bad_input() {
        assert!(pca(&[vec![1.0, 2.0]], 1).is_err());
        assert!(pca(&[vec![1.0, 2.0], vec![1.0]], 1).is_err());
        assert!(pca(&[vec![1.0], vec![2.0]], 2).is_err());
        // Copies of one vector, exactly or up to f32 rounding: no direction.
        let v = vec![0.3f32, -0.2, 0.9];
        let near: Vec<f32> = v.iter().map(|x| x * (1.0 + 1e-7)).collect();
        for rows in [vec![v.clone(), v.clone(), v.clone()], vec![v.clone(), near]] {
            let Err(e) = pca(&rows, 2) else { panic!("refused") };
            let e = e.to_string();
            assert!(e.contains("are all the same (up to rounding)"), "{e}");
        }
        // A real spread, even a small one, is not.
        let apart: Vec<f32> = v.iter().map(|x| x * 1.01).collect();
        pca(&[v.clone(), apart, vec![0.3, -0.1, 0.9]], 2).unwrap();
    }

    #[test]
    fn scatter_png_writes_a_png_of_the_requested_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.png");
        let panels = vec![
            Panel { title: "a".into(), points: vec![(0.0, 0.0, 0), (1.0, 2.0, 1)] },
            Panel { title: "b".into(), points: vec![(3.0, 3.0, 1)] },
        ];
        scatter_png(&path, &panels, &["en".into(), "de".into()], 200).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR: width and height, big-endian, at bytes 16..24.
        let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        assert_eq!(w, 400);
        assert_eq!(h, 200 + 30 + 22);
        let too_many: Vec<String> = (0..21).map(|i| i.to_string()).collect();
        assert!(scatter_png(&path, &panels, &too_many, 100).is_err());
    }

    /// Values ±1e308 are finite, but their range is not: plotters looped for ever on it.
    #[test]
    fn ranges_too_wide_to_draw_are_refused() {
        let e = bounds("loss", "values", [1e308, -1e308].into_iter()).unwrap_err();
        assert!(e.contains("loss: its values, from -1e308 to 1e308, lie too far apart to draw"), "{e}");
        assert_eq!(bounds("x", "values", [1.0].into_iter()).unwrap(), (1.0 - 1e-6, 1.0 + 1e-6));
        assert_eq!(bounds("x", "values", [0.0, 10.0].into_iter()).unwrap(), (-0.5, 10.5));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.png");
        let curves = |lo: f64, hi: f64| {
            vec![Curves { title: "loss".into(), lines: vec![vec![(1.0, lo), (2.0, hi)]], best: vec![None] }]
        };
        let e = curves_png(&path, &curves(-1e308, 1e308), &["run".into()], 200).unwrap_err().to_string();
        assert!(e.contains("loss: its values, from -1e308 to 1e308, lie too far apart"), "{e}");
        curves_png(&path, &curves(-1e300, 1e300), &["run".into()], 200).unwrap();
    }

    /// Steps too far apart are named as the steps: the message said "its values" of a loss of
    /// 1 and 2 (an outside probe).
    #[test]
    fn steps_too_far_apart_are_named_as_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.png");
        let curves =
            vec![Curves { title: "loss".into(), lines: vec![vec![(1e308, 1.0), (-1e308, 2.0)]], best: vec![None] }];
        let e = curves_png(&path, &curves, &["run".into()], 200).unwrap_err().to_string();
        assert!(e.contains("loss: its steps, from -1e308 to 1e308, lie too far apart to draw"), "{e}");
    }

    /// A `metrics.jsonl` whose last line is cut (no newline, not JSON: a run killed while
    /// writing it) or that ends in blank lines still plots, with a note naming the file and line;
    /// a bad line elsewhere stays an error (an outside probe: both failed the plot).
    #[test]
    fn a_cut_last_line_or_trailing_blank_lines_are_left_out_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let two = "{\"step\":1,\"loss\":0.5}\n{\"step\":2,\"loss\":0.4}\n";
        let cases = [
            ("cut", format!("{two}{{\"step\":3,\"lo"), Some(":3: the last line is cut off (not JSON")),
            ("blank", format!("{two}\n"), Some(": line 3 blank at its end, left out")),
            ("blanks", format!("{two}\n  \n"), Some(": lines 3 to 4 blank at its end, left out")),
            ("whole", two.to_string(), None),
            ("no-newline", two.trim_end().to_string(), None),
        ];
        for (name, text, note) in cases {
            let run = dir.path().join(name);
            std::fs::create_dir(&run).unwrap();
            let metrics = run.join("metrics.jsonl");
            std::fs::write(&metrics, &text).unwrap();
            let (records, got) = metrics_records(&metrics, &text).unwrap();
            assert_eq!(records.len(), 2, "{name}");
            match note {
                Some(want) => {
                    let got = got.unwrap_or_default();
                    assert!(got.starts_with(&metrics.display().to_string()) && got.contains(want), "{name}: {got}");
                }
                None => assert_eq!(got, None, "{name}"),
            }
            let curves = run_curves(&[run], &[]).unwrap();
            assert_eq!(curves[0].lines, vec![vec![(1.0, 0.5), (2.0, 0.4)]], "{name}");
        }
        // Not at the end, or followed by a newline: an error naming the line.
        for (name, text, line) in [
            ("middle", "{\"step\":1,\"loss\":0.5}\n{\"step\":2,\"lo\n{\"step\":3,\"loss\":0.3}\n", 2),
            ("blank-middle", "{\"step\":1,\"loss\":0.5}\n\n{\"step\":3,\"loss\":0.3}\n", 2),
            ("bad-last-with-newline", "{\"step\":1,\"loss\":0.5}\n{\"step\":2,\"lo\n", 2),
        ] {
            let run = dir.path().join(name);
            std::fs::create_dir(&run).unwrap();
            std::fs::write(run.join("metrics.jsonl"), text).unwrap();
            let Err(e) = run_curves(std::slice::from_ref(&run), &[]) else { panic!("{name}: plotted") };
            let e = format!("{e:#}");
            assert!(e.contains(&format!("{}:{line}: not JSON", run.join("metrics.jsonl").display())), "{name}: {e}");
        }
    }

    /// An empty language label is refused: its legend entry was blank (an outside probe).
    #[test]
    fn an_empty_language_label_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.txt");
        std::fs::write(&a, "one\ntwo\n").unwrap();
        for label in ["", " "] {
            let spec = format!("{label}={}", a.display());
            let e = read_labelled(&[spec.clone(), format!("de={}", a.display())], 2).unwrap_err().to_string();
            assert!(e.contains(&format!("--input {spec:?}: the language label before '=' is empty")), "{e}");
        }
    }

    /// A long label is cut with an ellipsis to the width its legend column leaves, so that it
    /// draws over no other entry and stays in the picture (an outside probe: 300 characters ran
    /// over the next entry and off the picture); short labels are kept whole.
    #[test]
    fn long_legend_labels_are_cut_to_their_column() {
        let long = "L".repeat(300);
        for (width, groups) in [
            (600, vec![long.clone(), "de".to_string()]),
            (200, vec!["english".to_string(), long.clone(), "x".to_string()]),
            (1800, (0..20).map(|i| format!("{long}{i}")).collect::<Vec<_>>()),
        ] {
            let entries = legend_entries(&groups, width);
            assert_eq!(entries.len(), groups.len());
            for (i, (cx, cy, label)) in entries.iter().enumerate() {
                let right = cx + 12 + label_width(label) as i32;
                assert!(right <= width as i32, "{width}: {label} ends at {right}");
                // The next entry on the same row starts at its dot's left edge.
                if let Some((nx, ny, _)) = entries.get(i + 1).filter(|e| e.1 == *cy) {
                    assert!(right < nx - 6, "{width}: {label} ends at {right}, the next dot at {nx},{ny}");
                }
                if label != &groups[i] {
                    assert!(label.ends_with('…') && groups[i].starts_with(label.trim_end_matches('…')), "{label}");
                }
            }
        }
        assert_eq!(legend_entries(&["de".to_string(), "en".to_string()], 600)[1].2, "en");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.png");
        let panels = vec![Panel { title: "a".into(), points: vec![(0.0, 0.0, 0), (1.0, 2.0, 1)] }];
        scatter_png(&path, &panels, &[long, "de".into()], 600).unwrap();
    }

    /// No tick label reads `-0.0` (a key point a rounding error below 0 did).
    #[test]
    fn tick_labels_have_no_negative_zero() {
        assert_eq!(tick_label(-0.0), tick_label(0.0));
        assert!(!tick_label(-1e-17).starts_with('-'), "{}", tick_label(-1e-17));
        assert_eq!(tick_label(-0.5), "-0.5");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(no_negative_zero("-0".into()), "0");
        assert_eq!(no_negative_zero("-10".into()), "-10");
    }

    #[test]
    fn labelled_inputs_need_one_file_per_language() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.txt");
        std::fs::write(&a, "one\ntwo\nthree\n").unwrap();
        let spec = |l: &str| format!("{l}={}", a.display());
        let got = read_labelled(&[spec("en"), spec("de")], 2).unwrap();
        assert_eq!(
            got,
            vec![
                ("en".to_string(), vec!["one".to_string(), "two".to_string()]),
                ("de".to_string(), vec!["one".to_string(), "two".to_string()])
            ]
        );
        let e = read_labelled(&[spec("en"), spec("en")], 2).unwrap_err().to_string();
        assert!(e.contains("the language en is given twice"), "{e}");
        let e = read_labelled(&["en".to_string()], 2).unwrap_err().to_string();
        assert!(e.contains("expected LANG=FILE"), "{e}");
    }
}
