//! A small server-side SVG line chart: a few series over a time window, with shaded spans
//! (an alert pending or firing) and vertical markers (notifications sent). The status page
//! (`/chart`) and `watchfire replay --format html` draw with it, so both look alike and
//! neither needs JavaScript.
//!
//! The SVG is self-contained (no fonts or styles fetched), carries `role="img"` with a
//! `<title>` for screen readers, and every text is XML-escaped. Series colours come from the
//! Okabe-Ito palette (told apart with colour blindness); the legend names each series, so
//! colour is never the only way to tell them apart.

use std::fmt::Write as _;

/// One line of the chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The legend's text (a label set).
    pub name: String,
    /// `(ms, value)` in time order; a non-finite value breaks the line.
    pub points: Vec<(i64, f64)>,
}

/// What a shaded span stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    Pending,
    Firing,
}

/// A shaded time span (`[from_ms, to_ms]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub from_ms: i64,
    pub to_ms: i64,
    pub kind: SpanKind,
}

/// What a vertical marker stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerKind {
    /// A firing notification.
    Firing,
    /// A resolved notification.
    Resolved,
}

/// A vertical marker at one time, with its tooltip.
#[derive(Clone, Debug, PartialEq)]
pub struct Marker {
    pub at_ms: i64,
    pub kind: MarkerKind,
    pub title: String,
}

/// A chart to draw.
#[derive(Clone, Debug)]
pub struct Chart<'a> {
    /// What the chart shows (its `<title>`, read by screen readers).
    pub title: &'a str,
    pub width: u32,
    pub height: u32,
    pub from_ms: i64,
    pub to_ms: i64,
    pub series: &'a [Series],
    pub spans: &'a [Span],
    pub markers: &'a [Marker],
    /// A horizontal line: the threshold the condition compares with.
    pub threshold: Option<f64>,
}

/// Line colours (Okabe-Ito), in series order.
pub const PALETTE: [&str; 6] = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00"];
/// Fill of a pending span (amber) and of a firing span (red), drawn translucent.
pub const PENDING_FILL: &str = "#bf8700";
pub const FIRING_FILL: &str = "#cf222e";
/// Markers: a firing notification (red) and a resolved one (green).
pub const FIRING_MARK: &str = "#cf222e";
pub const RESOLVED_MARK: &str = "#1a7f37";

const LEFT: f64 = 56.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 8.0;
const AXIS: f64 = 18.0;
const LEGEND_LINE: f64 = 14.0;

/// XML-escapes text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

/// A value as an axis shows it: short, without float noise (`0.95`, `1.2k`, `3e-05`).
pub fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if a == 0.0 {
        "0".into()
    } else if a >= 1e9 {
        format!("{}G", trim(format!("{:.2}", v / 1e9)))
    } else if a >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if a >= 1e4 {
        format!("{}k", trim(format!("{:.2}", v / 1e3)))
    } else if a >= 1e-3 {
        trim(format!("{v:.3}"))
    } else {
        format!("{v:.0e}")
    }
}

/// `HH:MM` (UTC) of a time in ms; `MM-DD HH:MM` when the window spans more than a day's part
/// of a clock face (a window over 20 hours).
fn clock(ms: i64, span_ms: i64) -> String {
    let fmt = if span_ms > 20 * 3_600_000 {
        "%m-%d %H:%M"
    } else {
        "%H:%M"
    };
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format(fmt).to_string())
        .unwrap_or_default()
}

/// The legend lines drawn: at most this many series are named (the chart's callers bound
/// the series they pass; this keeps the SVG's height bounded whatever they pass).
const MAX_LEGEND: usize = 8;

/// The chart as an `<svg>` element (no XML declaration: it can be inlined in HTML or served
/// as `image/svg+xml`).
pub fn render(c: &Chart<'_>) -> String {
    let legend = c.series.len().min(MAX_LEGEND);
    let w = f64::from(c.width.max(120));
    let plot_h = f64::from(c.height.max(60));
    let h = TOP + plot_h + AXIS + legend as f64 * LEGEND_LINE + 4.0;
    let (x0, x1) = (LEFT, w - RIGHT);
    let (y0, y1) = (TOP, TOP + plot_h);
    let span_ms = (c.to_ms - c.from_ms).max(1) as f64;
    let x_of = |t: i64| x0 + (t - c.from_ms) as f64 / span_ms * (x1 - x0);

    let finite = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite());
    let (mut lo, mut hi) = finite
        .chain(c.threshold.filter(|t| t.is_finite()))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let empty = lo > hi;
    if empty {
        (lo, hi) = (0.0, 1.0);
    } else if lo == hi {
        // A flat line sits in the middle.
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        (lo, hi) = (lo - pad, hi + pad);
    }
    let y_of = |v: f64| y1 - (v - lo) / (hi - lo) * (y1 - y0);

    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" role=\"img\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"11\"><title>{}</title>",
        escape(c.title)
    );
    let _ = write!(
        s,
        "<rect x=\"{x0}\" y=\"{y0}\" width=\"{}\" height=\"{plot_h}\" fill=\"#ffffff\" stroke=\"#8c959f\"/>",
        x1 - x0
    );
    for sp in c.spans {
        let (a, b) = (x_of(sp.from_ms.max(c.from_ms)), x_of(sp.to_ms.min(c.to_ms)));
        if b < a {
            continue;
        }
        let (fill, what) = match sp.kind {
            SpanKind::Pending => (PENDING_FILL, "pending"),
            SpanKind::Firing => (FIRING_FILL, "firing"),
        };
        let _ = write!(
            s,
            "<rect class=\"span-{what}\" x=\"{a:.1}\" y=\"{y0}\" width=\"{:.1}\" height=\"{plot_h}\" fill=\"{fill}\" fill-opacity=\"0.18\"><title>{what}</title></rect>",
            (b - a).max(1.0)
        );
    }
    // Axis labels: the value range and the time window.
    let _ = write!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#24292f\">{}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#24292f\">{}</text>",
        x0 - 4.0,
        y0 + 10.0,
        escape(&fmt_value(hi)),
        x0 - 4.0,
        y1,
        escape(&fmt_value(lo))
    );
    let _ = write!(
        s,
        "<text x=\"{x0}\" y=\"{}\" fill=\"#24292f\">{}</text><text x=\"{x1}\" y=\"{}\" text-anchor=\"end\" fill=\"#24292f\">{} UTC</text>",
        y1 + 13.0,
        clock(c.from_ms, c.to_ms - c.from_ms),
        y1 + 13.0,
        clock(c.to_ms, c.to_ms - c.from_ms)
    );
    if empty {
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#57606a\">no data</text>",
            (x0 + x1) / 2.0,
            (y0 + y1) / 2.0
        );
    }
    if let Some(t) = c.threshold.filter(|t| t.is_finite()) {
        let y = y_of(t);
        let _ = write!(
            s,
            "<g class=\"threshold\"><title>threshold {v}</title><line x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{x1}\" y2=\"{y:.1}\" stroke=\"#57606a\" stroke-width=\"1\" stroke-dasharray=\"2 2\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#57606a\">{v}</text></g>",
            x1 - 2.0,
            y - 2.0,
            v = escape(&fmt_value(t))
        );
    }
    for (i, series) in c.series.iter().enumerate() {
        let d = path(&series.points, &x_of, &y_of);
        if d.is_empty() {
            continue;
        }
        let _ = write!(
            s,
            "<path d=\"{d}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"><title>{}</title></path>",
            PALETTE[i % PALETTE.len()],
            escape(&series.name)
        );
    }
    for m in c.markers {
        if m.at_ms < c.from_ms || m.at_ms > c.to_ms {
            continue;
        }
        let x = x_of(m.at_ms);
        let (colour, class) = match m.kind {
            MarkerKind::Firing => (FIRING_MARK, "firing"),
            MarkerKind::Resolved => (RESOLVED_MARK, "resolved"),
        };
        // A shape per kind (a triangle for firing, a circle for resolved): colour is not the
        // only signal.
        let shape = match m.kind {
            MarkerKind::Firing => format!("<path d=\"M{:.1} {y0} l-4 -0 l4 7 l4 -7 z\" fill=\"{colour}\"/>", x),
            MarkerKind::Resolved => format!(
                "<circle cx=\"{x:.1}\" cy=\"{}\" r=\"3.5\" fill=\"{colour}\"/>",
                y0 + 4.0
            ),
        };
        let _ = write!(
            s,
            "<g class=\"marker-{class}\"><title>{}</title><line x1=\"{x:.1}\" y1=\"{y0}\" x2=\"{x:.1}\" y2=\"{y1}\" stroke=\"{colour}\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>{shape}</g>",
            escape(&m.title)
        );
    }
    for (i, series) in c.series.iter().take(legend).enumerate() {
        let y = y1 + AXIS + i as f64 * LEGEND_LINE + 8.0;
        let mut name: String = series.name.chars().take(90).collect();
        if name.len() < series.name.len() {
            name.push('…');
        }
        let _ = write!(
            s,
            "<rect x=\"{x0}\" y=\"{}\" width=\"10\" height=\"3\" fill=\"{}\"/><text x=\"{}\" y=\"{y}\" fill=\"#24292f\">{}</text>",
            y - 4.0,
            PALETTE[i % PALETTE.len()],
            x0 + 14.0,
            escape(&name)
        );
    }
    s.push_str("</svg>");
    s
}

/// The SVG path of one series: a new segment after every non-finite value.
fn path(points: &[(i64, f64)], x_of: &dyn Fn(i64) -> f64, y_of: &dyn Fn(f64) -> f64) -> String {
    let mut d = String::new();
    let mut pen_down = false;
    for &(t, v) in points {
        if !v.is_finite() {
            pen_down = false;
            continue;
        }
        let _ = write!(d, "{}{:.1} {:.1}", if pen_down { "L" } else { "M" }, x_of(t), y_of(v));
        pen_down = true;
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart<'a>(series: &'a [Series], spans: &'a [Span], markers: &'a [Marker]) -> String {
        render(&Chart {
            title: "gpu <temp>",
            width: 400,
            height: 100,
            from_ms: 0,
            to_ms: 600_000,
            series,
            spans,
            markers,
            threshold: None,
        })
    }

    #[test]
    fn lines_spans_markers_and_legend() {
        let series = vec![
            Series {
                name: "{gpu=\"0\"}".into(),
                points: vec![(0, 1.0), (300_000, 3.0), (600_000, 2.0)],
            },
            Series {
                name: "{gpu=\"1\"}".into(),
                points: vec![(0, 2.0), (300_000, f64::NAN), (600_000, 2.0)],
            },
        ];
        let spans = [Span {
            from_ms: 120_000,
            to_ms: 240_000,
            kind: SpanKind::Firing,
        }];
        let markers = [Marker {
            at_ms: 180_000,
            kind: MarkerKind::Firing,
            title: "paged <team>".into(),
        }];
        let svg = chart(&series, &spans, &markers);
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>"), "{svg}");
        assert!(svg.contains("<title>gpu &lt;temp&gt;</title>"), "{svg}");
        // The first series is one segment over three points; the second breaks at the NaN.
        assert!(svg.contains("d=\"M56.0 108.0L224.0 8.0L392.0 58.0\""), "{svg}");
        assert_eq!(
            svg.matches("M56.0 58.0").count() + svg.matches("M392.0 58.0").count(),
            2,
            "{svg}"
        );
        assert!(svg.contains("class=\"span-firing\" x=\"123.2\""), "{svg}");
        assert!(svg.contains("<title>paged &lt;team&gt;</title>"), "{svg}");
        assert!(svg.contains(">{gpu=&quot;0&quot;}</text>"), "{svg}");
        // The value range and the window are labelled.
        assert!(svg.contains(">3</text>") && svg.contains(">1</text>"), "{svg}");
        assert!(
            svg.contains(">00:00</text>") && svg.contains(">00:10 UTC</text>"),
            "{svg}"
        );
        assert!(!svg.contains("no data"));
        // Over a day, the axis says which day.
        let long = render(&Chart {
            title: "t",
            width: 400,
            height: 100,
            from_ms: 0,
            to_ms: 48 * 3_600_000,
            series: &series,
            spans: &[],
            markers: &[],
            threshold: Some(0.5),
        });
        // The threshold widens the range (0.5 is under every value) and is drawn dashed.
        assert!(
            long.contains("<g class=\"threshold\"><title>threshold 0.5</title>"),
            "{long}"
        );
        assert!(long.contains(">0.5</text>"), "{long}");
        assert!(
            long.contains(">01-01 00:00</text>") && long.contains(">01-03 00:00 UTC</text>"),
            "{long}"
        );
    }

    #[test]
    fn no_data_and_flat_lines() {
        let svg = chart(&[], &[], &[]);
        assert!(svg.contains(">no data</text>"), "{svg}");
        let flat = vec![Series {
            name: "x".into(),
            points: vec![(0, 5.0), (600_000, 5.0)],
        }];
        let svg = chart(&flat, &[], &[]);
        // A flat line is drawn across the middle of the plot.
        assert!(svg.contains("d=\"M56.0 58.0L392.0 58.0\""), "{svg}");
    }

    #[test]
    fn values_are_short() {
        assert_eq!(fmt_value(0.95), "0.95");
        assert_eq!(fmt_value(1.0), "1");
        assert_eq!(fmt_value(12_500.0), "12.5k");
        assert_eq!(fmt_value(3_000_000.0), "3M");
        assert_eq!(fmt_value(0.00003), "3e-5");
        assert_eq!(fmt_value(-2.5), "-2.5");
    }
}
