//! Prints a running JVM's introspection tables, for adding a JDK version
//! (docs/JAVA.md): `cargo run -p idleflow-hotspot --example vmstructs --
//! PID [WORD]` lists every field, type and constant whose name contains
//! WORD (all without it), then the Java threads and their Java frames.
//! `--time N` instead times N walks of every thread that has a last Java
//! frame, and N namings of their frames (names uncached: the cost of a
//! first sight).

use idleflow_hotspot::vmstructs::Field;
use idleflow_hotspot::Jvm;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(pid) = args.next().and_then(|p| p.parse().ok()) else {
        eprintln!("usage: vmstructs PID [WORD]");
        std::process::exit(2);
    };
    let word = args.next().unwrap_or_default();
    if word == "--time" {
        let n: u32 = args.next().and_then(|n| n.parse().ok()).unwrap_or(1000);
        time(pid, n);
        return;
    }
    let jvm = match Jvm::open(pid) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("vmstructs: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "{} at {:#x} ({})",
        jvm.libjvm.path, jvm.libjvm.base, jvm.release
    );
    let mut fields: Vec<_> = jvm
        .vm
        .fields
        .iter()
        .filter(|((t, f), _)| t.contains(&word) || f.contains(&word))
        .collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    for ((t, f), v) in fields {
        match v {
            Field::Offset(o) => println!("field    {t}::{f} +{o:#x}"),
            Field::Address(a) => println!("static   {t}::{f} @{a:#x}"),
        }
    }
    let mut types: Vec<_> = jvm
        .vm
        .types
        .iter()
        .filter(|(t, _)| t.contains(&word))
        .collect();
    types.sort();
    for (t, size) in types {
        println!("type     {t} {size}");
    }
    let mut ints: Vec<_> = jvm
        .vm
        .int_constants
        .iter()
        .filter(|(n, _)| n.contains(&word))
        .collect();
    ints.sort();
    for (n, v) in ints {
        println!("int      {n} = {v}");
    }
    let mut longs: Vec<_> = jvm
        .vm
        .long_constants
        .iter()
        .filter(|(n, _)| n.contains(&word))
        .collect();
    longs.sort();
    for (n, v) in longs {
        println!("long     {n} = {v:#x}");
    }
    let code = jvm.code_cache();
    match jvm.threads() {
        Ok(threads) => {
            for t in threads {
                println!(
                    "thread   {} {} {:x?}",
                    t.tid,
                    t.state.name.as_deref().unwrap_or("?"),
                    t.anchor
                );
                let (Some(anchor), Ok(code)) = (t.anchor, &code) else {
                    continue;
                };
                let walk = jvm.walk(code, anchor);
                for f in &walk.frames {
                    let name = jvm
                        .method_name(f.method)
                        .map_or_else(|e| format!("? ({e})"), |n| n.dotted());
                    println!("           {name} {:?} bci {:?}", f.kind, f.bci);
                }
                println!("           ({:x?})", walk.end);
            }
        }
        Err(e) => eprintln!("vmstructs: the threads: {e}"),
    }
}

/// Times `n` walks (and namings) of each of `pid`'s threads outside Java.
fn time(pid: u32, n: u32) {
    let jvm = Jvm::open(pid).unwrap_or_else(|e| {
        eprintln!("vmstructs: {e}");
        std::process::exit(1)
    });
    let code = jvm.code_cache().expect("the code cache");
    let anchors: Vec<_> = jvm
        .threads()
        .expect("the threads")
        .into_iter()
        .filter_map(|t| t.anchor)
        .collect();
    let start = std::time::Instant::now();
    let mut frames = 0;
    for _ in 0..n {
        for &a in &anchors {
            frames += jvm.walk(&code, a).frames.len();
        }
    }
    let walked = start.elapsed();
    let walks = u64::from(n) * anchors.len() as u64;
    let sample: Vec<_> = anchors
        .iter()
        .flat_map(|&a| jvm.walk(&code, a).frames)
        .collect();
    let start = std::time::Instant::now();
    for _ in 0..n {
        for f in &sample {
            let _ = jvm.method_name(f.method);
            if let Some(bci) = f.bci {
                let _ = jvm.line(f.method, bci);
            }
        }
    }
    let named = start.elapsed();
    // The same with a walker and names that remember (the recorder's way).
    let mut walker = jvm.walker().expect("the code cache");
    let mut names = idleflow_hotspot::Names::default();
    let start = std::time::Instant::now();
    for _ in 0..n {
        for &a in &anchors {
            for f in jvm.walk_with(&mut walker, a).frames {
                let _ = jvm.method_name_with(&mut names, f.method);
            }
        }
    }
    let remembered = start.elapsed();
    println!(
        "{walks} walks of {} threads: {:.1} µs a walk, {:.2} µs a frame ({} frames); \
         naming a frame (name and line, uncached): {:.2} µs; remembering walker and names: \
         {:.2} µs a walk with its names",
        anchors.len(),
        walked.as_secs_f64() * 1e6 / walks as f64,
        walked.as_secs_f64() * 1e6 / frames.max(1) as f64,
        frames / n.max(1) as usize,
        named.as_secs_f64() * 1e6 / (u64::from(n) * sample.len().max(1) as u64) as f64,
        remembered.as_secs_f64() * 1e6 / walks as f64,
    );
}
