//! End to end on real JVMs — OpenJDK 17 (Debian) and Temurin 25 — started
//! with `-XX:+DisableAttachMechanism`: their tables are read from outside,
//! and the Java threads found are the process's own, in the states the
//! program put them in (a parked thread and a sleeping one blocked, with a
//! last Java frame on their own stacks; a spinning one in Java).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use idleflow_hotspot::{FrameKind, Jvm, WalkEnd};

const PROGRAM: &str = r#"
import java.util.concurrent.locks.LockSupport;

public class Probe {
    static volatile long spins;

    static void level3() { spins++; LockSupport.park(); }
    static void level2() { level3(); spins++; }
    static void level1() { level2(); spins++; }

    public static void main(String[] args) throws Exception {
        Thread parked = new Thread(() -> { while (true) LockSupport.park(); }, "parked-one");
        Thread sleeper = new Thread(() -> {
            while (true) {
                try { Thread.sleep(60_000); } catch (InterruptedException e) { }
            }
        }, "sleeper-one");
        Thread spinner = new Thread(() -> { while (true) spins++; }, "spinner-one");
        Thread deep = new Thread(() -> { while (true) level1(); }, "deep-one");
        for (Thread t : new Thread[] {parked, sleeper, spinner, deep}) {
            t.setDaemon(true);
            t.start();
        }
        // Hot enough to be compiled (where the JIT is on).
        for (int i = 0; i < 20_000; i++) {
            LockSupport.unpark(deep);
            if (i % 200 == 0) Thread.sleep(1);
        }
        Thread.sleep(300);
        System.out.println("ready");
        System.in.read();
    }
}
"#;

/// The JDKs on this kind of machine, both required.
const JDKS: [(&str, &str); 2] = [
    ("/usr/lib/jvm/java-17-openjdk-amd64", "17."),
    ("/usr/lib/jvm/temurin-25-jdk-amd64", "25"),
];

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(java_home: &str, dir: &Path, flags: &[&str]) -> Running {
    start_program(java_home, dir, ("Probe", PROGRAM), flags)
}

/// Runs the single-file program `source` (class `name`) with `flags` and
/// attach disabled, once it printed `ready`.
fn start_program(
    java_home: &str,
    dir: &Path,
    (name, source): (&str, &str),
    flags: &[&str],
) -> Running {
    let java = Path::new(java_home).join("bin/java");
    assert!(
        java.exists(),
        "{} is missing: the machine image has OpenJDK 17 and Temurin 25",
        java.display()
    );
    let src = dir.join(format!("{name}.java"));
    std::fs::write(&src, source).unwrap();
    let mut child = Command::new(java)
        .arg("-XX:+DisableAttachMechanism")
        .args(flags)
        .arg(&src)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    // Nothing follows `ready` before it is asked for: nothing is buffered.
    child.stdout = Some(out.into_inner());
    Running(child)
}

/// The tid of the process's thread named `name`.
fn tid_named(pid: u32, name: &str) -> u32 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .and_then(|e| e.file_name().to_str()?.parse().ok())
        .unwrap_or_else(|| panic!("no thread {name} in {pid}"))
}

/// Whether `addr` lies in a private read-write mapping (a thread stack).
fn in_rw_mapping(pid: u32, addr: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .any(|l| {
            let (range, rest) = l.split_once(' ').unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let (a, b) = (
                u64::from_str_radix(a, 16).unwrap(),
                u64::from_str_radix(b, 16).unwrap(),
            );
            rest.starts_with("rw") && a <= addr && addr < b
        })
}

#[test]
fn the_threads_of_jvms_with_attach_disabled_are_read_from_outside() {
    for (home, release) in JDKS {
        let dir = tempfile::tempdir().unwrap();
        let child = start(home, dir.path(), &[]);
        let pid = child.0.id();
        let jvm = Jvm::open(pid).unwrap_or_else(|e| panic!("{home}: {e}"));
        assert!(
            jvm.release.starts_with(release),
            "{home}: release {:?}",
            jvm.release
        );
        assert!(
            jvm.vm.fields.len() > 500,
            "{home}: {} fields",
            jvm.vm.fields.len()
        );
        let threads = jvm.threads().unwrap();
        eprintln!(
            "{home}: {} ({} fields, {} types), threads: {threads:#x?}",
            jvm.release,
            jvm.vm.fields.len(),
            jvm.vm.types.len()
        );
        let tasks: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        assert!(threads.len() >= 5, "{home}: {threads:?}");
        for t in &threads {
            assert!(
                tasks.contains(&t.tid),
                "{home}: {t:?} is not a thread of {pid}"
            );
        }
        let find = |name: &str| {
            let tid = tid_named(pid, name);
            threads
                .iter()
                .find(|t| t.tid == tid)
                .unwrap_or_else(|| panic!("{home}: {name} ({tid}) not among {threads:?}"))
                .clone()
        };
        for name in ["parked-one", "sleeper-one"] {
            let t = find(name);
            assert_eq!(
                t.state.name.as_deref(),
                Some("_thread_blocked"),
                "{home}: {t:?}"
            );
            let a = t
                .anchor
                .unwrap_or_else(|| panic!("{home}: {name} has no last Java frame"));
            assert!(in_rw_mapping(pid, a.sp), "{home}: {t:?}");
            assert!(a.fp == 0 || a.fp > a.sp, "{home}: {t:?}");
        }
        // The spinner runs Java code: in Java, with no anchor, most reads
        // (a safepoint poll may catch it in the VM for a moment).
        let tid = tid_named(pid, "spinner-one");
        let mut in_java = 0;
        for _ in 0..20 {
            let t = jvm.thread(tid).unwrap().unwrap();
            if t.state.name.as_deref() == Some("_thread_in_Java") {
                assert_eq!(t.anchor, None, "{home}: {t:?}");
                in_java += 1;
            }
        }
        assert!(
            in_java >= 10,
            "{home}: the spinner was in Java in {in_java} of 20 reads"
        );
        let mut stdin = child.0.stdin.as_ref().unwrap();
        let _ = stdin.write_all(b"\n");
    }
}

#[test]
fn a_process_without_a_jvm_is_a_clear_error() {
    let err = Jvm::open(std::process::id()).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "process {} has no libjvm.so mapped (not a HotSpot JVM)",
            std::process::id()
        )
    );
}

/// Whether level3's, level2's and level1's frame kinds are the ones asked.
type KindsWanted = dyn Fn(&[FrameKind]) -> bool;

/// `deep-one`'s Java frames below the park, walked from outside: every
/// one named, in order, interpreted under `-Xint` (with the bytecode index
/// and source line of each call), compiled once hot under `-XX:-Inline` (each method its
/// own nmethod), compiled with inlined frames by default (the methods
/// inlined at the call, from the nmethod's scopes, with their bytecode
/// indexes and lines), and the walk ends at the call stub that started the
/// thread.
#[test]
fn java_frames_are_walked_and_named_from_outside_interpreted_and_compiled() {
    for (home, _) in JDKS {
        // The kinds level3, level2 and level1 must have: interpreted, each
        // compiled, or (the JIT's own choice) compiled with some inlined.
        let interpreted = |k: &[FrameKind]| k.iter().all(|&k| k == FrameKind::Interpreted);
        let compiled = |k: &[FrameKind]| k.iter().all(|&k| k == FrameKind::Compiled);
        let inlined =
            |k: &[FrameKind]| k.contains(&FrameKind::Inlined) && k[2] == FrameKind::Compiled;
        let modes: [(&[&str], &KindsWanted); 3] = [
            (&["-Xint"], &interpreted),
            (&["-XX:-Inline"], &compiled),
            (&[], &inlined),
        ];
        for (flags, kinds_wanted) in modes {
            let dir = tempfile::tempdir().unwrap();
            let child = start(home, dir.path(), flags);
            let pid = child.0.id();
            let jvm = Jvm::open(pid).unwrap_or_else(|e| panic!("{home}: {e}"));
            let code = jvm.code_cache().unwrap();
            let tid = tid_named(pid, "deep-one");
            // The JIT compiles in the background: wait for the frames to
            // be of the kind asked (a few seconds at most).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            let (names, walk) = loop {
                let t = jvm.thread(tid).unwrap().unwrap();
                let walk = jvm.walk(&code, t.anchor.expect("deep-one is parked"));
                let names: Vec<String> = walk
                    .frames
                    .iter()
                    .map(|f| {
                        jvm.method_name(f.method)
                            .map_or_else(|e| e.to_string(), |n| n.dotted())
                    })
                    .collect();
                let ours: Vec<_> = walk
                    .frames
                    .iter()
                    .zip(&names)
                    .filter(|(_, n)| n.starts_with("Probe.level"))
                    .collect();
                let kinds: Vec<FrameKind> = ours.iter().map(|(f, _)| f.kind).collect();
                if kinds.len() == 3 && kinds_wanted(&kinds) {
                    break (names, walk);
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{home} {flags:?}: {names:?} {walk:?}"
                );
                std::thread::sleep(std::time::Duration::from_millis(200));
            };
            eprintln!("{home} {flags:?}: {names:?} {:?}", walk.end);
            // A walker that remembers the code it saw walks the same, the
            // second time from what it remembered.
            let mut walker = jvm.walker().unwrap();
            let anchor = jvm.thread(tid).unwrap().unwrap().anchor.unwrap();
            for _ in 0..2 {
                assert_eq!(jvm.walk_with(&mut walker, anchor), walk, "{home} {flags:?}");
            }
            let at = names.iter().position(|n| n == "Probe.level3").unwrap();
            assert_eq!(
                names[at - 1..at + 3],
                [
                    "java.util.concurrent.locks.LockSupport.park",
                    "Probe.level3",
                    "Probe.level2",
                    "Probe.level1"
                ],
                "{home} {flags:?}"
            );
            assert!(names[at + 3].starts_with("Probe.lambda$main$"), "{names:?}");
            assert!(
                names.last().unwrap().starts_with("java.lang.Thread.run"),
                "{names:?}"
            );
            assert!(
                matches!(walk.end, WalkEnd::Stub(ref s) if s.starts_with("StubRoutines")),
                "{walk:?}"
            );
            {
                // level2 and level1 call at their first bytecode (compiled
                // frames: from the nmethod's scopes).
                let bci: Vec<_> = walk.frames[at..at + 3].iter().map(|f| f.bci).collect();
                assert_eq!(bci[1..], [Some(0), Some(0)], "{home}: {walk:?}");
                assert!(
                    bci[0] > Some(0),
                    "{home}: level3 calls park after spins++: {walk:?}"
                );
                // Lines from each method's line number table: the line
                // each is declared on (one line each), in the file.
                let declared = |m: &str| {
                    PROGRAM
                        .lines()
                        .position(|l| l.contains(&format!("static void {m}()")))
                        .unwrap() as u32
                        + 1
                };
                let lines: Vec<_> = walk.frames[at..at + 3]
                    .iter()
                    .map(|f| jvm.line(f.method, f.bci.unwrap()))
                    .collect();
                assert_eq!(
                    lines,
                    [
                        Some(declared("level3")),
                        Some(declared("level2")),
                        Some(declared("level1"))
                    ],
                    "{home}"
                );
            }
        }
    }
}

/// A thread parked 200 ms at a time in compiled code that inlined a
/// mutable call site; each `flip` on its input lets the JIT compile that
/// code again (20 µs parks), parks the thread in it again, then points
/// the call site elsewhere: the JVM deoptimizes the code, and the parked
/// thread's frame with it (its callee's return address patched to the
/// code's deoptimization handler) until its park ends.
const DEOPT: &str = r#"
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.invoke.MutableCallSite;
import java.util.concurrent.locks.LockSupport;

public class Deopt {
    static final MethodType AREA = MethodType.methodType(long.class, long.class);
    static final MutableCallSite SITE = new MutableCallSite(AREA);
    static final MethodHandle INVOKER = SITE.dynamicInvoker();
    static volatile long sink;
    static volatile boolean slow;

    static long square(long x) { return x * x; }
    static long triple(long x) { return 3 * x; }

    static long step(long i) throws Throwable {
        long a = (long) INVOKER.invokeExact(i);
        LockSupport.parkNanos(slow ? 200_000_000L : 20_000L);
        return a + sink;
    }

    public static void main(String[] args) throws Throwable {
        MethodHandles.Lookup l = MethodHandles.lookup();
        MethodHandle[] areas = {
            l.findStatic(Deopt.class, "square", AREA), l.findStatic(Deopt.class, "triple", AREA)
        };
        SITE.setTarget(areas[0]);
        Thread parker = new Thread(() -> {
            long s = 0;
            try {
                for (long i = 0; ; i++) s += step(i);
            } catch (Throwable e) {
                throw new RuntimeException(e);
            }
        }, "parker-one");
        parker.setDaemon(true);
        parker.start();
        Thread.sleep(1500);
        System.out.println("ready");
        java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
        for (int flips = 1; in.readLine() != null; flips++) {
            slow = false;
            Thread.sleep(400);
            slow = true;
            Thread.sleep(300);
            SITE.setTarget(areas[flips % 2]);
            System.out.println("flipped");
        }
    }
}
"#;

#[test]
fn a_frame_the_jvm_deoptimized_while_its_thread_waits_is_named_as_its_code_was() {
    for (home, _) in JDKS {
        let dir = tempfile::tempdir().unwrap();
        let mut child = start_program(home, dir.path(), ("Deopt", DEOPT), &[]);
        let pid = child.0.id();
        let jvm = Jvm::open(pid).unwrap_or_else(|e| panic!("{home}: {e}"));
        let tid = tid_named(pid, "parker-one");
        let mut stdin = child.0.stdin.take().unwrap();
        let mut out = BufReader::new(child.0.stdout.take().unwrap());
        let named = |walk: &idleflow_hotspot::Walk| -> Vec<(String, FrameKind, Option<u32>)> {
            walk.frames
                .iter()
                .map(|f| {
                    let n = jvm
                        .method_name(f.method)
                        .map_or_else(|e| e.to_string(), |n| n.dotted());
                    (n, f.kind, f.bci)
                })
                .collect()
        };
        let (mut deoptimized, mut compiled) = (0, 0);
        for _ in 0..8 {
            writeln!(stdin, "flip").unwrap();
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "flipped", "{home}");
            let code = jvm.code_cache().unwrap();
            let Some(anchor) = jvm.thread(tid).unwrap().and_then(|t| t.anchor) else {
                continue;
            };
            let walk = jvm.walk(&code, anchor);
            let frames = named(&walk);
            let Some(at) = frames.iter().position(|f| f.0.starts_with("Deopt.step")) else {
                panic!("{home}: no Deopt.step in {frames:?}");
            };
            if frames[at].1 == FrameKind::Interpreted {
                continue;
            }
            compiled += 1;
            // Named as the compiled code was, whether the frame was
            // deoptimized or not: step at its call of parkNanos (inlined
            // into it, or a compiled frame of its own: the JIT's choice),
            // with its bytecode index (a deoptimized frame's pc, the
            // handler's, has none: its own pc is kept in the frame).
            assert_eq!(
                frames[at - 1].0,
                "java.util.concurrent.locks.LockSupport.parkNanos",
                "{home}: {frames:?}"
            );
            assert_ne!(
                frames[at - 1].1,
                FrameKind::Interpreted,
                "{home}: {frames:?}"
            );
            assert!(
                frames[at].2.is_some(),
                "{home}: step's bytecode index: {frames:?}"
            );
            assert!(
                frames.last().unwrap().0.starts_with("java.lang.Thread.run"),
                "{home}: {frames:?}"
            );
            deoptimized += walk.deoptimized;
        }
        eprintln!("{home}: {compiled} walks in compiled step, {deoptimized} deoptimized frames");
        assert!(
            deoptimized > 0,
            "{home}: no walk met a deoptimized frame ({compiled} in compiled step)"
        );
    }
}
