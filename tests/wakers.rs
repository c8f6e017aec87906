//! End-to-end: who woke a thread. The recorder takes `sched_waking`, raised
//! in the waker's context, and notes whether an interrupt raised it: a
//! timer's wake-up that fires while another thread runs belongs to the
//! timer, never to the thread the interrupt hit.

mod common;

use common::*;
use std::collections::HashMap;

/// One `idleflow script` wake-up line: (waker, wakee, interrupt context if
/// one raised it).
fn wakeups(script: &str) -> Vec<(u32, u32, Option<String>)> {
    script
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.get(3) != Some(&"wakeup") || f.get(5) != Some(&"wakes") {
                return None;
            }
            let context = l
                .split_once("(in ")
                .map(|(_, rest)| rest.split(':').next().unwrap_or("").to_string());
            Some((f[4].parse().ok()?, f[6].parse().ok()?, context))
        })
        .collect()
}

/// Thread ids by name, from `idleflow script`'s thread lines.
fn tids(script: &str) -> HashMap<String, Vec<u32>> {
    let mut m: HashMap<String, Vec<u32>> = HashMap::new();
    for l in script.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(1) == Some(&"thread") && f.get(7) == Some(&"comm") {
            if let (Some(tid), Some(name)) = (f.get(2).and_then(|t| t.parse().ok()), f.get(8)) {
                let v = m.entry(name.to_string()).or_default();
                if !v.contains(&tid) {
                    v.push(tid);
                }
            }
        }
    }
    m
}

#[test]
fn a_timers_wakeup_is_the_timers_not_the_thread_it_hit() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("w.idleflow");
    // A thread pinned to CPU 0 sleeps 2 ms at a time while `yes`, pinned
    // there too, computes: its timer fires in an interrupt that hits `yes`.
    let duty = example("dutycycle");
    let script = format!(
        "taskset -c 0 yes > /dev/null & y=$!; {} --threads 1 --busy-ms 0.1 --sleep-ms 2 --seconds 2; kill $y",
        duty.display()
    );
    let out = run(idleflow()
        .args(["record", "-q", "--no-stacks", "-o"])
        .arg(&rec)
        .args(["--", "sh", "-c", &script]));
    assert!(out.status.success(), "record: {}", stderr(&out));
    let text = stdout(&run(idleflow().arg("script").arg(&rec)));
    let names = tids(&text);
    let sleeper = names.get("duty-0").and_then(|v| v.first()).copied();
    let sleeper = sleeper.unwrap_or_else(|| panic!("no duty-0 thread: {names:?}"));
    let hog = names.get("yes").cloned().unwrap_or_default();
    assert!(!hog.is_empty(), "no `yes` thread: {names:?}");
    let woken: Vec<_> = wakeups(&text)
        .into_iter()
        .filter(|w| w.1 == sleeper)
        .collect();
    let by_interrupt = woken.iter().filter(|w| w.2.is_some()).count();
    let hit_hog = woken
        .iter()
        .filter(|w| w.2.is_some() && hog.contains(&w.0))
        .count();
    let blamed_on_hog = woken
        .iter()
        .filter(|w| w.2.is_none() && hog.contains(&w.0))
        .count();
    println!(
        "{} wake-ups of the sleeper, {by_interrupt} in interrupts ({hit_hog} hit `yes`), \
         {blamed_on_hog} charged to `yes`",
        woken.len()
    );
    // 2 s of 2.1 ms cycles: about 950 wake-ups (CPU 0's are all seen).
    assert!(woken.len() > 500, "{} wake-ups seen", woken.len());
    assert!(
        by_interrupt * 100 >= woken.len() * 95,
        "{by_interrupt} of {} in interrupts",
        woken.len()
    );
    // The interrupts hit `yes` (it holds the CPU whenever the sleeper
    // sleeps), and none of those wake-ups is taken for its doing.
    assert!(
        hit_hog * 2 > by_interrupt,
        "{hit_hog} of {by_interrupt} hit `yes`"
    );
    assert_eq!(blamed_on_hog, 0);
    // The JSON and the report's header count them.
    let r = report_json(&rec);
    assert!(u(&r, "interrupt_wakeups") >= by_interrupt as u64, "{r}");
    let report = stdout(&run(idleflow().arg("report").arg(&rec)));
    assert!(report.contains(" from interrupts, "), "{report}");
}
