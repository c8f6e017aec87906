//! End to end: `idleflow export` read back by the real consumers — pprof
//! profiles by `go tool pprof` (Debian's `golang-go`), the root causes' CSV
//! by Python's `csv` module — which must show the same top paths, shares
//! and roots as `idleflow report`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use serde_json::Value;

/// One recording of the native chain example (DWARF lines, no frame
/// pointers) shared by the tests, with its default JSON report.
fn chain_recording() -> &'static (PathBuf, Value) {
    static REC: OnceLock<(PathBuf, Value)> = OnceLock::new();
    REC.get_or_init(|| {
        let _m = machine().expect("recording needs root");
        let dir = shared_dir("exports");
        let bin = build_c_example(
            &dir,
            "chain.c",
            "chain",
            &["-O2", "-fomit-frame-pointer", "-pthread", "-g"],
        );
        let rec = dir.join("chain.idleflow");
        let out = run(idleflow()
            .args(["record", "-q", "-o"])
            .arg(&rec)
            .arg("--")
            .arg(&bin)
            .arg("1500"));
        assert!(out.status.success(), "{}", stderr(&out));
        let out = run(idleflow()
            .arg("report")
            .arg(&rec)
            .args(["--format", "json"]));
        assert!(out.status.success(), "{}", stderr(&out));
        (rec, serde_json::from_slice(&out.stdout).unwrap())
    })
}

/// `go tool pprof ARGS PROFILE`, its standard output.
fn pprof(args: &[&str], profile: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(profile)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect("go (Debian's golang-go; .ci/run installs it)");
    assert!(
        out.status.success(),
        "go tool pprof {args:?}: {}",
        stderr(&out)
    );
    stdout(&out)
}

/// The frame names of a report path, innermost first, as pprof names them.
fn pprof_names(path: &Value) -> Vec<String> {
    path["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let name = f["name"].as_str().unwrap();
            if f["kind"] == "kernel" {
                format!("{name} [kernel]")
            } else {
                name.to_string()
            }
        })
        .collect()
}

/// `go tool pprof -traces -unit=ns` as (value ns, labels, frames innermost
/// first), largest first. A sample reads:
/// ```text
///     reason:  pipe read
/// 767699396ns   anon_pipe_read [kernel]
///              vfs_read [kernel]
/// ```
fn traces(text: &str) -> Vec<(u64, Vec<String>, Vec<String>)> {
    let mut out = Vec::new();
    for block in text.split("-----------+-").skip(1) {
        let mut value = None;
        let (mut labels, mut frames) = (Vec::new(), Vec::new());
        for line in block.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if line.starts_with('-') {
                continue;
            }
            let (first, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            match first.strip_suffix("ns").map(str::parse::<u64>) {
                Some(Ok(ns)) if value.is_none() => {
                    value = Some(ns);
                    frames.push(rest.trim().to_string());
                }
                _ if value.is_some() => frames.push(line.to_string()),
                _ => labels.push(format!("{first} {}", rest.trim())),
            }
        }
        if let Some(v) = value {
            out.push((v, labels, frames));
        }
    }
    out.sort_by_key(|s| std::cmp::Reverse(s.0));
    out
}

#[test]
fn pprof_export_reads_in_go_tool_pprof_with_the_reports_top_paths_and_shares() {
    let (rec, report) = chain_recording();
    let dir = tempfile::tempdir().unwrap();
    let pb = dir.path().join("idle.pb.gz");
    let out = run(idleflow()
        .args(["export", "--format", "pprof", "-o"])
        .arg(&pb)
        .arg(rec));
    assert!(out.status.success(), "{}", stderr(&out));
    // pprof leaves out samples of no idle (a thread that left a CPU idle
    // for less than the clock's resolution, or at the recording's end).
    let paths: Vec<&Value> = report["idle_paths"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| u(p, "idle_ns") > 0)
        .collect();
    let explained = u(&report["idle_paths"], "explained_ns");
    // -traces: one sample per path, the largest the report's top path,
    // frame for frame, with its idle and labels.
    let text = pprof(&["-traces", "-unit=ns"], &pb);
    let samples = traces(&text);
    assert_eq!(samples.len(), paths.len(), "{text}");
    let (ns, labels, frames) = &samples[0];
    let top = paths[0];
    assert_eq!(*ns, u(top, "idle_ns"), "{text}");
    assert_eq!(*frames, pprof_names(top), "{text}");
    let has = |l: &str| labels.iter().any(|x| x == l);
    assert!(has("reason: pipe read"), "{labels:?}");
    assert!(has("thread: worker"), "{labels:?}");
    let total: u64 = samples.iter().map(|s| s.0).sum();
    assert_eq!(total, explained, "the samples add up to the paths' idle");
    // -top: the program's frame of the top path carries (at least) its share
    // of the paths' idle, as pprof computes it.
    let program = top["frames"][top["program_frame"].as_u64().unwrap() as usize]["name"]
        .as_str()
        .unwrap();
    assert_eq!(program, "fill_buffer", "{top}");
    let text = pprof(&["-top", "-cum", "-nodecount=50"], &pb);
    let row = text
        .lines()
        .find(|l| l.split_whitespace().last() == Some(program))
        .unwrap_or_else(|| panic!("{program} in -top:\n{text}"));
    let cum_pct: f64 = row
        .split_whitespace()
        .nth(4)
        .unwrap()
        .trim_end_matches('%')
        .parse()
        .unwrap();
    let share_of_paths = 100.0 * u(top, "idle_ns") as f64 / explained as f64;
    assert!(
        cum_pct + 0.5 >= share_of_paths && share_of_paths > 80.0,
        "{program}: {cum_pct} % cumulative in pprof, {share_of_paths:.1} % of the paths' idle in the report\n{text}"
    );
    // The file and line of the program's frame (DWARF) reach pprof.
    let list = pprof(&["-list", "^fill_buffer$"], &pb);
    assert!(list.contains("chain.c"), "{list}");
}

#[test]
fn perfetto_export_decodes_with_the_switches_per_cpu_and_the_top_paths_stack() {
    use idleflow_export::perfetto::{ftrace_event, trace_packet, Trace};
    use idleflow_export::Message;
    let (rec, report) = chain_recording();
    let dir = tempfile::tempdir().unwrap();
    let trace_file = dir.path().join("idle.pftrace");
    let out = run(idleflow()
        .args(["export", "--format", "perfetto", "-o"])
        .arg(&trace_file)
        .arg(rec));
    assert!(out.status.success(), "{}", stderr(&out));
    let bytes = std::fs::read(&trace_file).unwrap();
    let trace = Trace::decode(&bytes[..]).expect("a Trace, decoded with the same protos");
    // Every dispatch of the window is a sched_switch on its CPU, most in
    // the compact columns: per CPU, (time, leaving thread if written,
    // thread switched in).
    let mut switches: std::collections::BTreeMap<u32, Vec<(u64, Option<i32>, i32)>> =
        Default::default();
    let (mut wakings, mut compact_wakings, mut samples) = (0u64, 0u64, Vec::new());
    let mut interned = None;
    let mut threads = 0;
    for p in &trace.packet {
        match &p.data {
            Some(trace_packet::Data::FtraceEvents(b)) => {
                let cpu = switches.entry(b.cpu.unwrap()).or_default();
                for e in &b.event {
                    match &e.event {
                        Some(ftrace_event::Event::SchedSwitch(s)) => {
                            cpu.push((e.timestamp.unwrap(), s.prev_pid, s.next_pid.unwrap()))
                        }
                        Some(ftrace_event::Event::SchedWaking(_)) => wakings += 1,
                        _ => {}
                    }
                }
                if let Some(c) = &b.compact_sched {
                    let n = c.switch_timestamp.len();
                    assert!(
                        [c.switch_prev_state.len(), c.switch_next_pid.len()]
                            .iter()
                            .chain([c.switch_next_comm_index.len()].iter())
                            .all(|&l| l == n),
                        "switch columns of one length"
                    );
                    let mut t = 0;
                    for (i, d) in c.switch_timestamp.iter().enumerate() {
                        t += d;
                        cpu.push((t, None, c.switch_next_pid[i]));
                        let comm = c.switch_next_comm_index[i] as usize;
                        assert!(comm < c.intern_table.len(), "comm index in the table");
                    }
                    assert_eq!(c.waking_pid.len(), c.waking_timestamp.len());
                    compact_wakings += c.waking_timestamp.len() as u64;
                }
            }
            Some(trace_packet::Data::PerfSample(s)) => {
                assert_eq!(p.sequence_flags, Some(2), "samples need the interned state");
                samples.push(s.callstack_iid.unwrap());
            }
            Some(trace_packet::Data::ProcessTree(t)) => threads += t.threads.len(),
            _ => {}
        }
        if let Some(i) = &p.interned_data {
            assert!(samples.is_empty(), "interned data comes before the samples");
            assert_eq!(p.sequence_flags, Some(1), "the sequence starts cleared");
            interned = Some(i.clone());
        }
    }
    let (start, stop) = (u(report, "start_ns"), u(report, "stop_ns"));
    for c in report["per_cpu"].as_array().unwrap() {
        let cpu = u(c, "cpu") as u32;
        let mut events = switches.remove(&cpu).unwrap_or_default();
        assert_eq!(events.len() as u64, u(c, "dispatches"), "CPU {cpu}");
        let compact = events.iter().filter(|e| e.1.is_none()).count();
        assert!(
            compact * 10 >= events.len() * 9,
            "CPU {cpu}: {compact} of {} switches compact",
            events.len()
        );
        // Perfetto's reading: the idle task runs from a switch to pid 0 to
        // the CPU's next switch. That idle is the report's, within the
        // time the report says it cannot know.
        events.sort_by_key(|e| e.0);
        let first = events.first().expect("switches on every CPU");
        assert!(first.1.is_some(), "a CPU's first switch names who leaves");
        let mut idle = if first.1 == Some(0) {
            first.0 - start
        } else {
            0
        };
        for w in events.windows(2) {
            if w[0].2 == 0 {
                idle += w[1].0 - w[0].0;
            }
        }
        let last = events.last().unwrap();
        assert!(
            first.0 >= start && last.0 <= stop,
            "CPU {cpu}: switches from {} to {} ns, outside the window {start}..{stop}",
            first.0,
            last.0
        );
        if last.2 == 0 {
            idle += stop - last.0;
        }
        let (reported, unknown) = (u(c, "idle_ns"), u(c, "unknown_ns"));
        println!(
            "CPU {cpu}: Perfetto's idle {idle} ns, the report's {reported} (+{unknown} unknown)"
        );
        assert!(
            idle >= reported && idle <= reported + unknown,
            "CPU {cpu}: idle as Perfetto reads it {idle} ns, the report's {reported} + {unknown} unknown"
        );
    }
    assert!(compact_wakings > 0, "wake-ups in the compact columns");
    assert_eq!(wakings + compact_wakings, u(report, "wakeups"));
    assert!(threads >= 3, "the process tree names the threads");
    // The top path's stack: the call stack most samples have, root first,
    // is the report's top path (innermost first there), frame for frame.
    let interned = interned.expect("interned paths");
    let name = |iid: u64| {
        let f = interned.frames.iter().find(|f| f.iid == Some(iid)).unwrap();
        let n = interned
            .function_names
            .iter()
            .find(|s| s.iid == f.function_name_id)
            .unwrap();
        String::from_utf8(n.str.clone().unwrap()).unwrap()
    };
    let mut by_stack: std::collections::HashMap<Vec<String>, u64> = Default::default();
    for iid in &samples {
        let cs = interned
            .callstacks
            .iter()
            .find(|c| c.iid == Some(*iid))
            .unwrap();
        let names: Vec<String> = cs.frame_ids.iter().rev().map(|&f| name(f)).collect();
        *by_stack.entry(names).or_default() += 1;
    }
    let (top_stack, n) = by_stack.iter().max_by_key(|(_, n)| **n).unwrap();
    let top = &report["idle_paths"]["paths"][0];
    let expected: Vec<String> = top["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| match f["line"].as_u64() {
            Some(l) => format!("{}:{l}", f["name"].as_str().unwrap()),
            None => f["name"].as_str().unwrap().to_string(),
        })
        .collect();
    assert_eq!(*top_stack, expected);
    assert_eq!(*n, u(top, "dispatches"), "one sample per dispatch to idle");
    // protoc reads it without the protos too.
    let raw = Command::new("protoc")
        .arg("--decode_raw")
        .stdin(std::fs::File::open(&trace_file).unwrap())
        .output()
        .expect("protoc (Debian's protobuf-compiler; .ci/run installs it)");
    assert!(
        raw.status.success(),
        "protoc --decode_raw: {}",
        stderr(&raw)
    );
    let text = stdout(&raw);
    assert!(
        text.contains("66 {"),
        "perf samples (field 66) in the raw decode"
    );
}

/// Headless Chromium (Debian's `chromium`) on `page` with `args`: its
/// standard output and error. No network, a fresh profile.
fn chromium(page: &Path, args: &[&str]) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium (Debian's chromium; .ci/run installs it)");
    assert!(out.status.success(), "chromium {args:?}: {}", stderr(&out));
    (stdout(&out), stderr(&out))
}

#[test]
fn the_html_report_renders_in_chromium_with_the_answer_and_no_console_error() {
    let (rec, report) = chain_recording();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let out = run(idleflow()
        .args(["report", "--format", "html", "-o"])
        .arg(&page)
        .arg(rec));
    assert!(out.status.success(), "{}", stderr(&out));
    let html = std::fs::read_to_string(&page).unwrap();
    // One file: nothing to load from anywhere, and a policy that forbids
    // it; every link points inside the page.
    for external in ["src=\"http", "<link", "<script src"] {
        assert!(!html.contains(external), "{external} in the page");
    }
    for url in html.split("url(").skip(1) {
        assert!(
            url.starts_with('#'),
            "url({} in the page",
            &url[..url.len().min(40)]
        );
    }
    assert!(
        html.contains("Content-Security-Policy\" content=\"default-src 'none'"),
        "the page's policy"
    );
    let hrefs: Vec<&str> = html.split("href=\"").skip(1).collect();
    assert!(hrefs.len() > 5, "the page links its parts");
    for h in &hrefs {
        assert!(
            h.starts_with('#'),
            "a link out of the page: {}",
            &h[..h.len().min(60)]
        );
    }
    let (dom, log) = chromium(&page, &["--dump-dom"]);
    let top = &report["idle_paths"]["paths"][0];
    // The answer leads: its table's first row names the top path's
    // program frame, with a bar of its share, and links to the root cause
    // its waits lead to and to its frames in the flame graph.
    let answer_at = dom.find("class=\"answer\"").expect("the answer");
    let first_row = &dom[answer_at..];
    let first_row = &first_row[first_row.find("<tr>").unwrap() + 4..];
    let first_row = &first_row[first_row.find("<tr>").unwrap()..];
    let first_row = &first_row[..first_row.find("</tr>").unwrap()];
    assert!(
        first_row.contains("pipe read — worker in fill_buffer"),
        "{first_row}"
    );
    assert!(first_row.contains("class=\"bar\""), "{first_row}");
    assert!(
        first_row.contains("data-find=\"fill_buffer\""),
        "{first_row}"
    );
    let chain = first_row
        .split("href=\"#root-")
        .nth(1)
        .expect("a link to the cause's chain");
    let root = &chain[..chain.find('"').unwrap()];
    // The root it links to is a row of the root causes, whose chain holds
    // the cause's wait.
    let row = &dom[dom
        .find(&format!("id=\"root-{root}\""))
        .expect("the linked root")..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(
        row.contains("class=\"chain\"") && row.contains("worker"),
        "{row}"
    );
    // The paths table has the top path with its share.
    let share = format!("{:.1} %", top["share_pct"].as_f64().unwrap());
    let table = &dom[dom.find("id=\"paths\"").expect("paths table")..];
    assert!(
        table.contains(&share) && table.contains("fill_buffer"),
        "{share}"
    );
    // The plot has a line per CPU; the flame graph is embedded.
    let cpus = report["per_cpu"].as_array().unwrap().len();
    assert_eq!(dom.matches("<polyline").count(), cpus);
    assert!(dom.contains("class=\"flame\""));
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") && (l.contains("rror") || l.contains("Uncaught")))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    // A screenshot that is not blank: many colours, a good part not white.
    let shot = dir.path().join("shot.png");
    chromium(
        &page,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1200,1400",
        ],
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    let colours: std::collections::HashSet<&[u8]> = pixels.iter().copied().collect();
    let inked = pixels
        .iter()
        .filter(|p| p[..3].iter().any(|&c| c < 200))
        .count();
    assert!(colours.len() > 20, "{} colours", colours.len());
    assert!(
        inked * 100 > pixels.len(),
        "{inked} of {} pixels not white",
        pixels.len()
    );
    // What a `frames` link does, through the page's address: the flame
    // graph searched for the top path's frame shows it in the search
    // colour; without the search no frame has it. (A window taller than
    // the page: nothing scrolls, the whole page is in the shot.)
    let searched = |address_tail: &str| {
        let shot = dir.path().join("searched.png");
        let target = dir.path().join(format!("report.html{address_tail}"));
        chromium(
            &target,
            &[
                &format!("--screenshot={}", shot.display()),
                "--window-size=1280,6000",
            ],
        );
        let decoder =
            png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let px = info.color_type.samples();
        buf[..info.buffer_size()]
            .chunks(px)
            .filter(|p| p[..3] == [230, 0, 230])
            .count()
    };
    let found = searched("#find=fill_buffer");
    assert!(found > 500, "{found} pixels of found frames");
    assert_eq!(searched(""), 0, "no frame found without a search");
}

/// `export --format csv` read by Python's `csv` module (a real consumer):
/// one row per root cause, in the report's order, whose idle adds up to
/// the report's roots and whose first row names the report's top root.
#[test]
fn csv_export_reads_in_python_with_the_reports_root_causes() {
    let rec =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/recordings/holders.idleflow");
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("roots.csv");
    let out = run(idleflow()
        .arg("export")
        .arg(&rec)
        .args(["-f", "csv", "-o"])
        .arg(&csv));
    assert!(out.status.success(), "{}", stderr(&out));
    let report = report_json(&rec);
    let roots = report["root_causes"]["roots"].as_array().unwrap();
    assert!(!roots.is_empty());
    // Python reads it back: (row count, sum of idle_ns, first row's kind, threads, frame).
    let py = run(Command::new("python3").arg("-c").arg(
        "import csv, json, sys\n\
         rows = list(csv.DictReader(open(sys.argv[1], newline='')))\n\
         print(json.dumps([len(rows), sum(int(r['idle_ns']) for r in rows), rows[0]['kind'], rows[0]['threads'], rows[0]['frame'], rows[0]['reason']]))",
    ).arg(&csv));
    assert!(
        py.status.success(),
        "python3 (Debian's python3; .ci/run installs it): {}",
        stderr(&py)
    );
    let got: Value = serde_json::from_slice(&py.stdout).unwrap();
    let total: u64 = roots.iter().map(|r| u(r, "idle_ns")).sum();
    assert_eq!(got[0].as_u64().unwrap() as usize, roots.len());
    assert_eq!(got[1].as_u64().unwrap(), total);
    let top = &roots[0];
    assert_eq!(got[2], top["kind"]);
    assert_eq!(got[3], top["threads"]["name"]);
    assert_eq!(got[5], top["reason"]);
    let program = top["program_frame"].as_u64().unwrap() as usize;
    let f = &top["frames"][program];
    let at = match f["line"].as_u64() {
        Some(l) => format!("{}:{l}", f["name"].as_str().unwrap()),
        None => f["name"].as_str().unwrap().to_string(),
    };
    assert_eq!(
        got[4].as_str().unwrap(),
        at,
        "{}",
        std::fs::read_to_string(&csv).unwrap()
    );
}
