//! The report as one self-contained HTML file (`report --format html`), to
//! share: it loads nothing from the network and runs no script of its own.
//!
//! In order: the answer (the text report's headline and root causes, as
//! [`text::render_answer`] words them), each CPU's idle over time as an SVG plot
//! (from [`Report::idle_over_time`]), the flame graph of the merged paths
//! (inferno's SVG, searchable, in a frame of its own so its script and ids
//! stay its own), then the paths, the root causes, the per-CPU table and
//! the threads as tables.
//!
//! Invariant: every text from the recording is HTML-escaped.

use std::fmt::Write;

use base64::Engine;
use html_escape::encode_text as esc;

use crate::pass::Analysis;
use crate::path::FoldOptions;
use crate::render::flame::{self, FlameError, Weight};
use crate::render::text;
use crate::sections::{IdleOverTime, Report};

const STYLE: &str =
    "body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1200px;color:#222}\
pre.answer{background:#f6f6f0;border-left:4px solid #c60;padding:.8em;white-space:pre-wrap}\
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:90%}\
th,td{border-bottom:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}\
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
iframe.flame{width:100%;height:640px;border:1px solid #ccc}\
.frames{font-family:monospace;font-size:85%;color:#555}\
svg.plot text{font-size:11px}";

/// Plot colours, one per CPU (cycled).
const COLOURS: [&str; 8] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// How the page's flame graph folds the merged paths: by idle time, pool
/// threads merged under their name pattern.
pub const FOLD: FoldOptions = FoldOptions {
    dispatches: false,
    merge_threads: true,
};

/// The HTML report of `report` (of the recording `source`), its flame
/// graph drawn from the merged paths of `analysis` (the report's) folded
/// with [`FOLD`] ([`crate::sections::idle_paths::folded`]).
pub fn render(report: &Report, source: &str, analysis: &Analysis) -> Result<String, FlameError> {
    let folded_paths = crate::sections::idle_paths::folded(analysis, FOLD, false, false);
    let answer = text::render_answer(report);
    let mut svg = Vec::new();
    if !folded_paths.is_empty() {
        flame::svg(&folded_paths, Weight::IdleNs, flame::View::Paths, &mut svg)?;
    }
    let mut o = String::new();
    let _ = render_into(
        &mut o,
        report,
        source,
        &answer,
        (!svg.is_empty()).then_some(&svg[..]),
    );
    Ok(o)
}

fn render_into(
    o: &mut String,
    r: &Report,
    source: &str,
    answer: &str,
    flame_svg: Option<&[u8]>,
) -> std::fmt::Result {
    writeln!(o, "<!DOCTYPE html>")?;
    writeln!(o, "<html lang=\"en\"><head><meta charset=\"utf-8\">")?;
    writeln!(o, "<title>idleflow: {}</title>", esc(source))?;
    writeln!(o, "<style>{STYLE}</style></head><body>")?;
    writeln!(o, "<h1>idleflow report of {}</h1>", esc(source))?;
    let command = if r.command.is_empty() {
        "system-wide or --pid".to_string()
    } else {
        r.command.join(" ")
    };
    writeln!(
        o,
        "<p>{} on {} CPUs ({}), kernel {}; <code>{}</code></p>",
        esc(&format!("{:.3} s", r.duration_ns as f64 / 1e9)),
        r.cpus,
        esc(&r.hostname),
        esc(&r.kernel_release),
        esc(&command)
    )?;
    writeln!(o, "<h2 id=\"answer\">The answer</h2>")?;
    writeln!(o, "<pre class=\"answer\">{}</pre>", esc(answer.trim_end()))?;
    if let Some(t) = &r.idle_over_time {
        writeln!(o, "<h2>Idle per CPU over time</h2>")?;
        plot(o, t, r)?;
    }
    if let Some(svg) = flame_svg {
        writeln!(o, "<h2>Flame graph of the idle-causing paths</h2>")?;
        writeln!(
            o,
            "<p>Width: idle after a thread left a CPU in that call path. Click to zoom, \
             Ctrl-F or the Search button to find a frame.</p>"
        )?;
        // As tall as the graph: its widest frames are at the bottom, and a
        // frame of fixed height would show the deep stacks' empty top.
        let height = svg_height(svg).map_or(640, |h| h + 8);
        writeln!(
            o,
            "<iframe class=\"flame\" style=\"height:{height}px\" title=\"flame graph\" \
             src=\"data:image/svg+xml;base64,{}\"></iframe>",
            base64::engine::general_purpose::STANDARD.encode(svg)
        )?;
    }
    paths(o, r)?;
    roots(o, r)?;
    cpus(o, r)?;
    threads(o, r)?;
    writeln!(o, "</body></html>")
}

/// The `height` of an SVG's root element, px.
fn svg_height(svg: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(&svg[..svg.len().min(4096)]).ok()?;
    let root = &text[text.find("<svg")?..];
    let root = &root[..root.find('>')?];
    let at = root.find(" height=\"")? + " height=\"".len();
    let value = &root[at..];
    value[..value.find('"')?]
        .trim_end_matches("px")
        .parse()
        .ok()
}

/// Each CPU's idle % per window, one polyline each, with axes.
fn plot(o: &mut String, t: &IdleOverTime, r: &Report) -> std::fmt::Result {
    let (w, h, left, bottom) = (900.0, 220.0, 40.0, 24.0);
    let n = t.per_cpu.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let span_s = n as f64 * t.window_ns as f64 / 1e9;
    // The last window ends with the recording: a share of its own length.
    let width = |i: usize| {
        let start = i as u64 * t.window_ns;
        t.window_ns.min(r.duration_ns.saturating_sub(start)).max(1)
    };
    writeln!(
        o,
        "<svg class=\"plot\" width=\"{w}\" height=\"{}\" viewBox=\"0 0 {w} {}\" role=\"img\" \
         aria-label=\"idle per CPU over time\">",
        h + bottom + 4.0,
        h + bottom + 4.0
    )?;
    let x = |i: f64| left + (w - left - 10.0) * i / n as f64;
    let y = |pct: f64| 4.0 + h * (1.0 - pct / 100.0);
    for pct in [0.0, 50.0, 100.0] {
        writeln!(
            o,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\
             <text x=\"2\" y=\"{:.1}\">{pct:.0} %</text>",
            w - 10.0,
            y(pct),
            y(pct),
            y(pct) + 4.0
        )?;
    }
    writeln!(
        o,
        "<text x=\"{left}\" y=\"{}\">0 s</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{span_s:.2} s \
         ({} ms windows)</text>",
        h + bottom,
        w - 10.0,
        h + bottom,
        t.window_ns / 1_000_000
    )?;
    for (ci, series) in t.per_cpu.iter().enumerate() {
        let points: Vec<String> = series
            .iter()
            .enumerate()
            .map(|(i, ns)| {
                let pct = 100.0 * *ns as f64 / width(i) as f64;
                format!("{:.1},{:.1}", x(i as f64 + 0.5), y(pct.min(100.0)))
            })
            .collect();
        let cpu = r.per_cpu.get(ci).and_then(|c| c.cpu).unwrap_or(ci as u32);
        writeln!(
            o,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"><title>CPU {cpu}</title></polyline>",
            COLOURS[ci % COLOURS.len()],
            points.join(" ")
        )?;
        writeln!(
            o,
            "<text x=\"{}\" y=\"14\" fill=\"{}\">CPU {cpu}</text>",
            left + 10.0 + 60.0 * ci as f64,
            COLOURS[ci % COLOURS.len()]
        )?;
    }
    writeln!(o, "</svg>")
}

fn paths(o: &mut String, r: &Report) -> std::fmt::Result {
    let ip = &r.idle_paths;
    writeln!(o, "<h2>Idle-causing paths</h2>")?;
    writeln!(
        o,
        "<p>Each dispatch that left a CPU idle, by its merged path: {:.1} % of the idle.</p>",
        ip.explained_pct
    )?;
    writeln!(
        o,
        "<table id=\"paths\"><tr><th>share</th><th>idle ms</th><th>to idle</th>\
         <th>process: reason — threads</th><th>frames, innermost first</th></tr>"
    )?;
    for p in ip.paths.iter().take(50) {
        let threads: Vec<String> = p.threads.iter().map(|t| p.process_threads(t)).collect();
        let frames: Vec<String> = p
            .frames
            .iter()
            .map(|f| {
                if f.frame.line > 0 {
                    format!("{}:{}", f.frame.name, f.frame.line)
                } else {
                    f.frame.name.clone()
                }
            })
            .collect();
        let program = p
            .program()
            .map(|f| format!(" in {}", f.frame.name))
            .unwrap_or_default();
        writeln!(
            o,
            "<tr><td class=\"n\">{:.1} %</td><td class=\"n\">{:.3}</td><td class=\"n\">{}</td>\
             <td>{}: {} — {}{}</td><td class=\"frames\">{}</td></tr>",
            p.share_pct,
            p.idle_ns as f64 / 1e6,
            p.dispatches,
            esc(&p.process),
            esc(p.reason.words()),
            esc(&threads.join(", ")),
            esc(&program),
            esc(&frames.join(" ← "))
        )?;
    }
    writeln!(o, "</table>")
}

fn roots(o: &mut String, r: &Report) -> std::fmt::Result {
    let rc = &r.root_causes;
    if rc.roots.is_empty() {
        return Ok(());
    }
    writeln!(o, "<h2>Root causes of idle</h2>")?;
    writeln!(
        o,
        "<table id=\"roots\"><tr><th>share</th><th>idle ms</th><th>root</th></tr>"
    )?;
    for root in rc.roots.iter().take(20) {
        let threads = if root.threads.count > 1 {
            format!("{} ×{}", root.threads.name, root.threads.count)
        } else {
            root.threads.name.clone()
        };
        let mut what = format!("{}: {} {}", root.process, threads, root.reason);
        if let Some(d) = &root.device {
            what.push_str(&format!(", ended by the {d}"));
        }
        if let Some(f) = root.program_frame.and_then(|i| root.frames.get(i)) {
            what.push_str(&format!(" in {}", f.frame.name));
        }
        writeln!(
            o,
            "<tr><td class=\"n\">{:.1} %</td><td class=\"n\">{:.3}</td><td>{}</td></tr>",
            root.share_pct,
            root.idle_ns as f64 / 1e6,
            esc(&what)
        )?;
    }
    writeln!(o, "</table>")
}

fn cpus(o: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(o, "<h2>Per-CPU idle</h2>")?;
    writeln!(
        o,
        "<table id=\"cpus\"><tr><th>CPU</th><th>to idle</th><th>from idle</th><th>idle ms</th>\
         <th>idle %</th><th>unknown ms</th><th>breaks</th><th>lost</th></tr>"
    )?;
    for c in r.per_cpu.iter().chain(std::iter::once(&r.total)) {
        let cpu = c.cpu.map_or_else(|| "all".to_string(), |n| n.to_string());
        writeln!(
            o,
            "<tr><td>{cpu}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.3}</td>\
             <td class=\"n\">{:.2}</td><td class=\"n\">{:.3}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            c.idle_dispatches_to,
            c.idle_dispatches_from,
            c.idle_ns as f64 / 1e6,
            c.idle_pct,
            c.unknown_ns as f64 / 1e6,
            c.breaks,
            c.lost
        )?;
    }
    writeln!(o, "</table>")
}

fn threads(o: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(o, "<h2>Threads whose leaving made a CPU idle</h2>")?;
    writeln!(
        o,
        "<table id=\"threads\"><tr><th>pid</th><th>tid</th><th>name</th><th>runtime ms</th>\
         <th>run %</th><th>wait %</th><th>blk %</th><th>to idle</th><th>idle ms after</th></tr>"
    )?;
    for t in r.threads.iter().take(30) {
        writeln!(
            o,
            "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{:.3}</td>\
             <td class=\"n\">{:.1}</td><td class=\"n\">{:.1}</td><td class=\"n\">{:.1}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{:.3}</td></tr>",
            t.pid,
            t.tid,
            esc(&t.comm),
            t.runtime_ns as f64 / 1e6,
            t.running_pct,
            t.runnable_pct,
            t.blocked_pct,
            t.idle_dispatches_caused,
            t.idle_ns_caused as f64 / 1e6
        )?;
    }
    writeln!(o, "</table>")
}

#[cfg(test)]
mod tests {
    use super::svg_height;

    #[test]
    fn the_flame_graphs_height_is_read_from_its_root_element() {
        let svg = br#"<?xml version="1.0"?><svg version="1.1" width="1200" height="1206" onload="init(evt)"><rect height="5"/></svg>"#;
        assert_eq!(svg_height(svg), Some(1206));
        assert_eq!(svg_height(b"<svg width=\"3\">"), None);
        assert_eq!(svg_height(b"not svg"), None);
    }
}
