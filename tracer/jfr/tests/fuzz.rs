//! Runs the fuzz target of the JFR reader (`tracer/jfr/fuzz`, cargo-fuzz on
//! the nightly toolchain) for a bounded time: any bytes given as a JVM's
//! flight recording must give waits, notes or an error, never a panic, a
//! hang or an allocation the input does not pay for. Seeds: the chunk
//! written by `common`, the same cut short, and a real recording of a JDK 17
//! convoy made here with idleflow's settings. `IDLEFLOW_FUZZ_SECONDS` sets
//! the time (default 60).

mod common;
#[path = "../../../tests/support/fuzz.rs"]
mod fuzz;

use std::path::Path;
use std::process::Command;

const JDK17: &str = "/usr/lib/jvm/java-17-openjdk-amd64";

/// Three threads taking turns at a lock, sleeping while they hold it.
const CONVOY: &str = r#"
public class Seed {
    static final Object lock = new Object();
    public static void main(String[] args) throws Exception {
        Thread[] ts = new Thread[3];
        for (int i = 0; i < ts.length; i++) {
            ts[i] = new Thread(() -> {
                for (int j = 0; j < 100; j++) {
                    synchronized (lock) {
                        try { Thread.sleep(1); } catch (InterruptedException e) { return; }
                    }
                }
            }, "worker-" + i);
            ts[i].start();
        }
        for (Thread t : ts) t.join();
    }
}
"#;

/// A flight recording of [`CONVOY`] with idleflow's settings, every wait.
fn real_recording(dir: &Path) -> Vec<u8> {
    let java = Path::new(JDK17).join("bin/java");
    assert!(
        java.exists(),
        "{} is needed (.ci/run installs openjdk-17-jdk)",
        java.display()
    );
    let src = dir.join("Seed.java");
    std::fs::write(&src, CONVOY).unwrap();
    let jfc = dir.join("idleflow.jfc");
    std::fs::write(
        &jfc,
        idleflow_jfr::settings(&idleflow_jfr::Thresholds::all(0)),
    )
    .unwrap();
    let jfr = dir.join("seed.jfr");
    let out = Command::new(java)
        .arg(format!(
            "-XX:StartFlightRecording=settings={},filename={}",
            jfc.display(),
            jfr.display()
        ))
        .arg(&src)
        .output()
        .expect("run java");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(&jfr).unwrap()
}

#[test]
fn the_jfr_reader_survives_fuzzing() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let corpus = tempfile::tempdir().unwrap();
    let made = common::chunk();
    std::fs::write(corpus.path().join("made"), &made).unwrap();
    std::fs::write(corpus.path().join("made-cut"), &made[..made.len() / 2]).unwrap();
    let work = tempfile::tempdir().unwrap();
    let real = real_recording(work.path());
    // The seed is what the converter reads: it must hold the convoy's waits.
    let mut waits = 0;
    let head = idleflow_jfr::convert_from(
        std::io::Cursor::new(&real),
        "seed",
        real.len() as u64,
        &idleflow_jfr::Options {
            pid: 1,
            offset_ns: 0,
            thresholds: idleflow_jfr::Thresholds::all(0),
            all_waits: Vec::new(),
            ephemeral_ports: (32768, 60999),
        },
        |r| {
            waits += u64::from(matches!(r, idleflow_format::Record::JavaWait(_)));
            Ok::<(), std::io::Error>(())
        },
    )
    .unwrap();
    assert!(head.waits >= 100 && waits == head.waits, "{head:?}");
    std::fs::write(corpus.path().join("real.jfr"), &real).unwrap();
    fuzz::run_fuzz_target(
        here,
        "jfr",
        corpus.path(),
        &[
            format!("-max_len={}", real.len() + 4096),
            "-rss_limit_mb=1024".into(),
            "-malloc_limit_mb=256".into(),
        ],
        5_000,
    );
}
