//! The report as one self-contained HTML file (`report --format html`), to
//! share and to print: it loads nothing from the network (a Content
//! Security Policy forbids it) and its only script of its own is the few
//! lines that point the flame graph's search at a frame.
//!
//! In order: the answer as a table (the program's causes, the causes with
//! no program frame in one row, the idle after other processes; each with
//! a bar of its share, a link to the chain its waits lead to and one that
//! searches the flame graph for its frame), the root causes with their
//! whole chains, each CPU's idle over time as an SVG plot (from
//! [`Report::idle_over_time`]), the flame graph of the merged paths
//! (inferno's SVG, searchable, in a frame of its own so its script and ids
//! stay its own), then the paths, the per-CPU table and the threads.
//! The rows and their words are the text report's ([`text::cause_words`],
//! [`text::root_words`], [`text::link_words`]), chosen by the same rules.
//!
//! Invariants: every text from the recording is HTML-escaped (and escaped
//! again where it sits in the flame graph's `srcdoc`); every link points
//! inside the page.

use std::fmt::Write;

use html_escape::{encode_double_quoted_attribute as attr, encode_text as esc};

use crate::path::{FoldOptions, PathFrame};
use crate::render::flame::{self, FlameError, Weight};
use crate::render::text;
use crate::sections::idle_paths::Cause;
use crate::sections::root_causes::RootKind;
use crate::sections::{IdleOverTime, Report};

const STYLE: &str =
    "body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}\
nav a{margin-right:1em}\
p.lead{font-size:110%}\
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:90%}\
table.answer,table.roots{width:100%}\
th,td{border-bottom:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:top}\
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
td.share{width:11em;white-space:nowrap;font-variant-numeric:tabular-nums}\
.bar{display:inline-block;width:6em;height:.8em;background:#eee;margin-right:.5em;vertical-align:middle}\
.bar span{display:block;height:100%;background:#c60;print-color-adjust:exact;-webkit-print-color-adjust:exact}\
tr.other .bar span{background:#999}\
td.see{white-space:nowrap}td.see a{margin-right:.6em}\
ol.chain{margin:.3em 0 0;padding-left:1.2em;list-style:none;color:#444}\
ol.chain li:before{content:\"\\2190  \"}\
p.note{color:#555;font-size:90%;margin:.2em 0}\
iframe.flame{width:100%;height:640px;border:1px solid #ccc}\
.frames{font-family:monospace;font-size:85%;color:#555}\
svg.plot text{font-size:11px}\
:target{background:#fff4d6}\
@media print{nav,td.see,iframe.flame,.flame-note{display:none}body{margin:0;max-width:none}}";

/// The page's policy: nothing from the network; inline styles and
/// scripts (the flame graph's own, and the page's few lines) only.
const POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; \
img-src data:; frame-src 'self'";

/// The page's script: a link with `data-find` searches the flame graph
/// for that regular expression and brings it into view; so does the
/// page's address ending in `#find=REGEX` once the flame graph has loaded.
const SCRIPT: &str = "(function(){\
var f=document.getElementById('flame-frame');if(!f)return;\
function find(re){try{var w=f.contentWindow;if(w.searching)w.reset_search();w.search(re);}catch(e){}\
f.scrollIntoView();}\
document.addEventListener('click',function(e){var a=e.target.closest('a[data-find]');\
if(a){e.preventDefault();find(a.getAttribute('data-find'));}});\
f.addEventListener('load',function(){var h=decodeURIComponent(location.hash);\
if(h.indexOf('#find=')===0)find(h.slice(6));});\
})();";

/// Where the flame graph's document begins: `history.replaceState`, which
/// its zoom and search call to keep their state in the address, throws
/// in a frame with no address of its own; it is made a no-op there.
const FLAME_PRELUDE: &str = "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body{margin:0}body>svg{width:100%;display:block}</style>\
<script>(function(){var r=history.replaceState.bind(history);\
history.replaceState=function(a,b,c){try{r(a,b,c);}catch(e){}};})();</script></head><body>";

/// Plot colours, one per CPU (cycled).
const COLOURS: [&str; 8] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Root causes in the page's table, at most, and the smallest share
/// shown, % (the JSON and `export -f csv` have them all).
const ROOTS_SHOWN: usize = 20;
const ROOT_MIN_SHARE: f64 = 0.05;

/// How the page's flame graph folds the merged paths: by idle time, pool
/// threads merged under their name pattern.
pub const FOLD: FoldOptions = FoldOptions {
    dispatches: false,
    merge_threads: true,
};

/// The HTML report of `report` (of the recording `source`), its flame
/// graph drawn from `folded_paths` (the merged paths folded with [`FOLD`]:
/// [`crate::sections::idle_paths::MergedPaths`]).
pub fn render(
    report: &Report,
    source: &str,
    folded_paths: &[String],
) -> Result<String, FlameError> {
    let mut svg = Vec::new();
    if !folded_paths.is_empty() {
        flame::svg(folded_paths, Weight::IdleNs, flame::View::Paths, &mut svg)?;
    }
    let mut o = String::new();
    let _ = render_into(
        &mut o,
        report,
        source,
        (!svg.is_empty()).then_some(&svg[..]),
    );
    Ok(o)
}

fn render_into(
    o: &mut String,
    r: &Report,
    source: &str,
    flame_svg: Option<&[u8]>,
) -> std::fmt::Result {
    writeln!(o, "<!DOCTYPE html>")?;
    writeln!(o, "<html lang=\"en\"><head><meta charset=\"utf-8\">")?;
    writeln!(
        o,
        "<meta http-equiv=\"Content-Security-Policy\" content=\"{POLICY}\">"
    )?;
    writeln!(
        o,
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    )?;
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
    let mut nav = vec![("answer", "The answer")];
    if !r.root_causes.roots.is_empty() {
        nav.push(("roots", "Root causes"));
    }
    if r.idle_over_time.is_some() {
        nav.push(("over-time", "Idle over time"));
    }
    if flame_svg.is_some() {
        nav.push(("flame", "Flame graph"));
    }
    nav.extend([("paths", "Paths"), ("cpus", "CPUs"), ("threads", "Threads")]);
    let links: Vec<String> = nav
        .iter()
        .map(|(id, what)| format!("<a href=\"#{id}\">{what}</a>"))
        .collect();
    writeln!(o, "<nav>{}</nav>", links.join(""))?;
    answer(o, r, flame_svg.is_some())?;
    roots(o, r, flame_svg.is_some())?;
    if let Some(t) = &r.idle_over_time {
        writeln!(o, "<h2 id=\"over-time\">Idle per CPU over time</h2>")?;
        plot(o, t, r)?;
    }
    if let Some(svg) = flame_svg {
        writeln!(
            o,
            "<h2 id=\"flame\">Flame graph of the idle-causing paths</h2>"
        )?;
        writeln!(
            o,
            "<p class=\"flame-note\">Width: idle after a thread left a CPU in that call path. Click to zoom, \
             Ctrl-F or the Search button to find a frame; the <em>frames</em> links above search for theirs.</p>"
        )?;
        // As tall as the graph: its widest frames are at the bottom, and a
        // frame of fixed height would show the deep stacks' empty top.
        let height = svg_height(svg).map_or(640, |h| h + 8);
        let svg = String::from_utf8_lossy(svg);
        // The SVG goes inside an HTML document: its XML prolog and
        // doctype stay out.
        let body = svg.find("<svg").map_or(&svg[..], |at| &svg[at..]);
        let doc = format!("{FLAME_PRELUDE}{body}</body></html>");
        writeln!(
            o,
            "<iframe id=\"flame-frame\" class=\"flame\" style=\"height:{height}px\" title=\"flame graph\" \
             srcdoc=\"{}\"></iframe>",
            attr(&doc)
        )?;
    }
    paths(o, r, flame_svg.is_some())?;
    cpus(o, r)?;
    threads(o, r)?;
    writeln!(o, "<script>{SCRIPT}</script>")?;
    writeln!(o, "</body></html>")
}

/// A share as a bar and its number.
fn share_cell(pct: f64) -> String {
    format!(
        "<td class=\"share\"><span class=\"bar\"><span style=\"width:{:.1}%\"></span></span>{pct:.1} %</td>",
        pct.clamp(0.0, 100.0)
    )
}

/// A regular expression that matches `name` literally (what the flame
/// graph's search takes).
fn literal_regex(name: &str) -> String {
    let mut re = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        if "\\^$.|?*+()[]{}/".contains(c) {
            re.push('\\');
        }
        re.push(c);
    }
    re
}

/// A link that searches the flame graph for `frame` (none without one,
/// or without a flame graph).
fn find_link(frame: Option<&PathFrame>, flame: bool) -> String {
    match frame {
        Some(f) if flame && !f.frame.name.is_empty() => format!(
            "<a href=\"#flame\" data-find=\"{}\" title=\"search the flame graph for {}\">frames</a>",
            attr(&literal_regex(&f.frame.name)),
            attr(&f.frame.name)
        ),
        _ => String::new(),
    }
}

/// The root whose chain a cause's waits are part of: the first (the
/// largest) whose chain holds a link of the cause's process, threads and
/// reason, or that is itself such a wait (a device's, or one no waker
/// ended).
fn root_of(r: &Report, c: &Cause) -> Option<usize> {
    let reason = c.reason.to_string();
    r.root_causes
        .roots
        .iter()
        .take(ROOTS_SHOWN)
        .take_while(|root| root.share_pct >= ROOT_MIN_SHARE)
        .position(|root| {
            let itself = matches!(root.kind, RootKind::Device | RootKind::Unknown)
                && root.process == c.process
                && root.threads.name == c.threads.name
                && root.reason == reason;
            itself
                || root.chain.iter().any(|l| {
                    l.process == c.process
                        && l.threads.name == c.threads.name
                        && l.reason == c.reason
                })
        })
}

/// The answer as a table: the window, how idle, how much the paths
/// explain; then the program's causes, those with no program frame in
/// one row, the idle after other processes; then what the paths leave out.
fn answer(o: &mut String, r: &Report, flame: bool) -> std::fmt::Result {
    let ip = &r.idle_paths;
    writeln!(o, "<h2 id=\"answer\">The answer</h2>")?;
    if let Some(f) = &r.flight {
        let at = |ns: u64| ns.saturating_sub(r.recording_start_ns) as f64 / 1e9;
        writeln!(
            o,
            "<p class=\"lead\">Flight recorder dump {}: <b>{}</b> fired at {:.3} s of {:.3} s: {}</p>",
            f.number,
            esc(&f.trigger),
            at(f.fired_ns),
            at(r.stop_ns),
            esc(&f.state)
        )?;
    }
    writeln!(
        o,
        "<p class=\"lead\">{:.1} s on {} CPUs, <b>{:.0} % idle</b> ({:.2} of {:.2} CPU-s); the paths below \
         explain {:.0} % of it.</p>",
        r.duration_ns as f64 / 1e9,
        r.cpus,
        r.total.idle_pct,
        ip.idle_ns as f64 / 1e9,
        r.duration_ns as f64 * r.cpus as f64 / 1e9,
        ip.explained_pct
    )?;
    writeln!(
        o,
        "<table class=\"answer\" id=\"causes\"><tr><th>share of idle</th><th>what left the CPUs idle</th>\
         <th>see</th></tr>"
    )?;
    let (program, other): (Vec<&Cause>, Vec<&Cause>) =
        ip.causes.iter().partition(|c| c.program && !c.jvm_internal);
    for c in program.iter().take(text::HEADLINE_PATHS) {
        if c.share_pct < text::HEADLINE_MIN_SHARE {
            break;
        }
        let chain = root_of(r, c)
            .map(|k| format!("<a href=\"#root-{k}\">chain</a>"))
            .unwrap_or_default();
        writeln!(
            o,
            "<tr>{}<td>{}</td><td class=\"see\">{chain}{}</td></tr>",
            share_cell(c.share_pct),
            esc(&text::cause_words(c, usize::MAX, usize::MAX)),
            find_link(c.frame.as_ref(), flame)
        )?;
    }
    let grouped: Vec<&&Cause> = other
        .iter()
        .filter(|c| c.share_pct >= text::HEADLINE_MIN_SHARE)
        .take(text::GROUPED_SHOWN)
        .collect();
    if !grouped.is_empty() {
        let share: f64 = other.iter().map(|c| c.share_pct).sum();
        let mut parts: Vec<String> = grouped
            .iter()
            .map(|c| {
                let mut who = esc(&c.threads.name).to_string();
                if c.threads.count > 1 {
                    who.push_str(&format!(" ×{}", c.threads.count));
                }
                let whose = if c.jvm_internal { " (HotSpot)" } else { "" };
                format!(
                    "{} — {who}{whose} {:.1} %",
                    esc(&c.reason.to_string()),
                    c.share_pct
                )
            })
            .collect();
        if other.len() > grouped.len() {
            parts.push(format!("+{} more", other.len() - grouped.len()));
        }
        writeln!(
            o,
            "<tr class=\"other\">{}<td>no program frame: {}</td><td class=\"see\"></td></tr>",
            share_cell(share),
            parts.join("; ")
        )?;
    }
    let (after_others, shown) = ip.after_other_processes();
    if after_others >= 0.05 {
        let names: Vec<String> = shown
            .map(|p| {
                format!(
                    "{} {:.1} % ({})",
                    esc(&p.process),
                    p.share_pct,
                    esc(&p.reason.to_string())
                )
            })
            .collect();
        let what = if names.is_empty() {
            "after other processes".to_string()
        } else {
            format!("after other processes: {}", names.join(", "))
        };
        writeln!(
            o,
            "<tr class=\"other\">{}<td>{what}</td><td class=\"see\"></td></tr>",
            share_cell(after_others)
        )?;
    }
    writeln!(o, "</table>")?;
    let part = |ns: u64| ns as f64 * 100.0 / ip.idle_ns.max(1) as f64;
    let rest = &ip.not_in_paths;
    let not_in: Vec<String> = [
        (
            rest.no_cause_ns,
            "idle since the window's start or a stream break",
        ),
        (rest.idleflow_ns, "after idleflow's own threads"),
    ]
    .iter()
    .filter(|(ns, _)| part(*ns) >= 0.05)
    .map(|(ns, what)| format!("{:.1} % {what}", part(*ns)))
    .collect();
    if !not_in.is_empty() {
        writeln!(
            o,
            "<p class=\"note\">Not in the paths: {}.</p>",
            not_in.join("; ")
        )?;
    }
    Ok(())
}

/// The root causes: the kinds' shares, then each root with its whole
/// chain, from the victims' wait out, and a link to its frames.
fn roots(o: &mut String, r: &Report, flame: bool) -> std::fmt::Result {
    let rc = &r.root_causes;
    if rc.roots.is_empty() {
        return Ok(());
    }
    writeln!(o, "<h2 id=\"roots\">Root causes of idle</h2>")?;
    let kinds: Vec<String> = [
        ("code paths", rc.by_kind[0]),
        ("devices", rc.by_kind[1]),
        ("CPU contention", rc.by_kind[2]),
        ("unknown", rc.by_kind[3]),
    ]
    .iter()
    .filter(|(_, ns)| text::part_of(rc, *ns) >= 0.05)
    .map(|(what, ns)| format!("{what} {:.1} %", text::part_of(rc, *ns)))
    .collect();
    writeln!(
        o,
        "<p>Each idle interval followed down its wait chain to the thread that held everyone up: {}.</p>",
        kinds.join(", ")
    )?;
    writeln!(
        o,
        "<table class=\"roots\"><tr><th>share of idle</th><th>root cause, and the chain that led to it</th>\
         <th>see</th></tr>"
    )?;
    for (k, root) in rc.roots.iter().take(ROOTS_SHOWN).enumerate() {
        if root.share_pct < ROOT_MIN_SHARE {
            break;
        }
        let kind = match root.kind {
            RootKind::Path => "code path",
            RootKind::Device => "device",
            RootKind::Contention => "CPU contention",
            RootKind::Unknown => "unknown",
        };
        write!(
            o,
            "<tr id=\"root-{k}\">{}<td><b>{kind}</b>: {}",
            share_cell(root.share_pct),
            esc(&text::root_words(root))
        )?;
        if !root.chain.is_empty() {
            write!(o, "<ol class=\"chain\">")?;
            for link in root.chain.iter().rev() {
                write!(
                    o,
                    "<li>{} [{:.1} %]</li>",
                    esc(&text::link_words(link)),
                    text::part_of(rc, link.idle_ns)
                )?;
            }
            write!(o, "</ol>")?;
        }
        writeln!(
            o,
            "</td><td class=\"see\">{}</td></tr>",
            find_link(root.frame(), flame)
        )?;
    }
    writeln!(o, "</table>")
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

fn paths(o: &mut String, r: &Report, flame: bool) -> std::fmt::Result {
    let ip = &r.idle_paths;
    writeln!(o, "<h2 id=\"paths\">Idle-causing paths</h2>")?;
    writeln!(
        o,
        "<p>Each dispatch that left a CPU idle, by its merged path: {:.1} % of the idle.</p>",
        ip.explained_pct
    )?;
    writeln!(
        o,
        "<table class=\"paths\"><tr><th>share</th><th>idle ms</th><th>to idle</th>\
         <th>process: reason — threads</th><th>frames, innermost first</th><th>see</th></tr>"
    )?;
    for (k, p) in ip.paths.iter().take(50).enumerate() {
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
            "<tr id=\"path-{k}\"><td class=\"n\">{:.1} %</td><td class=\"n\">{:.3}</td><td class=\"n\">{}</td>\
             <td>{}: {} — {}{}</td><td class=\"frames\">{}</td><td class=\"see\">{}</td></tr>",
            p.share_pct,
            p.idle_ns as f64 / 1e6,
            p.dispatches,
            esc(&p.process),
            esc(p.reason.words()),
            esc(&threads.join(", ")),
            esc(&program),
            esc(&frames.join(" ← ")),
            find_link(p.program().or(p.frames.first()), flame)
        )?;
    }
    writeln!(o, "</table>")
}

fn cpus(o: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(o, "<h2 id=\"cpus\">Per-CPU idle</h2>")?;
    writeln!(
        o,
        "<table><tr><th>CPU</th><th>to idle</th><th>from idle</th><th>idle ms</th>\
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
    writeln!(
        o,
        "<h2 id=\"threads\">Threads whose leaving made a CPU idle</h2>"
    )?;
    writeln!(
        o,
        "<table><tr><th>pid</th><th>tid</th><th>name</th><th>runtime ms</th>\
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
