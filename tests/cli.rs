//! The command line as a user meets it: modes of `record`, exit codes,
//! Ctrl-C, bad input and missing privileges, through the real binary.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

#[test]
fn the_commands_exit_code_becomes_idleflows_and_a_quick_target_records_fine() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.idleflow");
    let out = run(idleflow().args(["record", "-o"]).arg(&rec).args([
        "--",
        "sh",
        "-c",
        "echo hello; exit 3",
    ]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "hello\n",
        "the command's stdout passes through"
    );
    let r = report_json(&rec);
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["stop_reason"], "command exited");
    assert_eq!(r["command"][0], "sh");
    assert!(u(&r, "dispatches") > 0);
    assert_eq!(r["target_pids"].as_array().unwrap().len(), 1);
}

#[test]
fn a_recording_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.idleflow");
    // A file already there, readable by all, is made private as well.
    std::fs::write(&rec, b"old").unwrap();
    std::fs::set_permissions(&rec, std::fs::Permissions::from_mode(0o644)).unwrap();
    // The default mode: the recorder's file, then the user stacks resolved
    // into a new one that replaces it.
    let out = run(idleflow().args(["record", "-q", "-o"]).arg(&rec).args([
        "--",
        "sh",
        "-c",
        "sleep 0.2",
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    let mode = std::fs::metadata(&rec).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the recording's mode is {mode:o}");
    assert!(u(&report_json(&rec), "dispatches") > 0);
}

#[test]
fn under_sudo_the_recording_goes_to_the_user_who_ran_it_and_they_read_it() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some(_m) = machine() else { return };
    let (dir, bin) = open_dir_with_idleflow();
    let rec = dir.path().join("r.idleflow");
    // What sudo sets for the command it runs as root.
    let out = run(idleflow()
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .args(["record", "-q", "-o"])
        .arg(&rec)
        .args(["--", "sh", "-c", "sleep 0.2"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let meta = std::fs::metadata(&rec).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // That user reads it without privileges; nobody else could.
    let out = run(as_nobody("").arg(&bin).arg("report").arg(&rec));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("idle ("));
    // Without sudo's variables the recording stays root's.
    let out = run(idleflow()
        .env_remove("SUDO_UID")
        .env_remove("SUDO_GID")
        .args(["record", "-q", "-o"])
        .arg(&rec)
        .args(["--", "sh", "-c", "sleep 0.1"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::metadata(&rec).unwrap().uid(), 0);
    let out = run(as_nobody("").arg(&bin).arg("report").arg(&rec));
    assert!(!out.status.success(), "nobody read root's recording");
}

#[test]
fn what_is_written_from_a_recording_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    // A committed recording: no root needed to read it.
    let rec = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/recordings/holders.idleflow");
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| {
        // Each file already there, readable by all, is made private too.
        let f = dir.path().join(name);
        std::fs::write(&f, b"old").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        f
    };
    let written: Vec<(std::path::PathBuf, Vec<&str>)> = vec![
        (at("r.txt"), vec!["report", "-o"]),
        (at("r.html"), vec!["report", "--format", "html", "-o"]),
        (at("idle.svg"), vec!["flamegraph", "-o"]),
        (at("idle.pb.gz"), vec!["export", "--format", "pprof", "-o"]),
        (at("roots.csv"), vec!["export", "--format", "csv", "-o"]),
    ];
    for (file, args) in &written {
        let out = run(idleflow().args(args).arg(file).arg(&rec));
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let meta = std::fs::metadata(file).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{args:?}");
        assert!(meta.len() > 3, "{args:?} wrote {} bytes", meta.len());
    }
    let diff = at("diff.svg");
    let out = run(idleflow()
        .args(["diff", "--svg", "-o"])
        .arg(&diff)
        .arg(&rec)
        .arg(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/golden/recordings/holders-waits.idleflow"),
        ));
    assert!(out.status.success(), "diff: {}", stderr(&out));
    assert_eq!(
        std::fs::metadata(&diff).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // What is not a regular file is written as it is, its mode left alone.
    let out = run(idleflow().args(["report", "-o", "/dev/stdout"]).arg(&rec));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Root causes of idle"));
}

#[test]
fn a_command_that_cannot_start_is_a_clear_error_and_leaves_no_file() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.idleflow");
    let out = run(idleflow()
        .args(["record", "-o"])
        .arg(&rec)
        .args(["--", "/nonexistent/program"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot run `/nonexistent/program`"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "files left behind"
    );
}

#[test]
fn duration_records_system_wide_and_pid_shows_only_that_process() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut sleeper = Command::new("sh")
        .args(["-c", "while :; do sleep 0.01; done"])
        .spawn()
        .unwrap();
    let rec = dir.path().join("pid.idleflow");
    let out = run(idleflow()
        .args(["record", "--duration", "1", "--pid"])
        .arg(sleeper.id().to_string())
        .arg("-o")
        .arg(&rec));
    assert!(out.status.success(), "{}", stderr(&out));
    let r = report_json(&rec);
    let d = u(&r, "duration_ns");
    assert!((950_000_000..1_500_000_000).contains(&d), "duration {d}");
    assert_eq!(r["stop_reason"], "duration");
    // Every CPU is still counted...
    assert_eq!(r["per_cpu"].as_array().unwrap().len() as u64, u(&r, "cpus"));
    // ...but the thread table shows the shell and its children only.
    let threads = r["threads"].as_array().unwrap();
    assert!(!threads.is_empty());
    for t in threads {
        let comm = t["comm"].as_str().unwrap();
        assert!(comm == "sh" || comm == "sleep", "unexpected thread {t}");
    }
    assert!(
        threads.iter().any(|t| t["comm"] == "sleep"),
        "children are shown"
    );
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();

    // System-wide, with the same shell running (a quiet machine may have
    // nothing else that leaves a CPU idle in half a second): its threads
    // are shown although no --pid names them, and not only theirs.
    let mut sleeper = Command::new("sh")
        .args(["-c", "while :; do sleep 0.01; done"])
        .spawn()
        .unwrap();
    let rec = dir.path().join("all.idleflow");
    let out = run(idleflow()
        .args(["record", "-q", "-d", "0.5", "-o"])
        .arg(&rec));
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "--quiet prints nothing");
    let r = report_json(&rec);
    assert!(r["target_pids"].as_array().unwrap().is_empty());
    let threads = r["threads"].as_array().unwrap();
    assert!(threads.len() > 1, "system-wide shows all threads");
    let pids: std::collections::BTreeSet<u64> = threads.iter().map(|t| u(t, "pid")).collect();
    assert!(
        pids.len() > 1 && threads.iter().any(|t| t["comm"] == "sleep"),
        "system-wide shows every process's threads: {threads:?}"
    );
}

#[test]
fn recording_stops_when_the_watched_process_exits() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut short = Command::new("sleep").arg("0.5").spawn().unwrap();
    let rec = dir.path().join("r.idleflow");
    let t0 = Instant::now();
    let mut rec_cmd = idleflow()
        .args(["record", "-q", "--pid"])
        .arg(short.id().to_string())
        .arg("-o")
        .arg(&rec)
        .spawn()
        .unwrap();
    short.wait().unwrap();
    let status = rec_cmd.wait().unwrap();
    assert!(status.success());
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(report_json(&rec)["stop_reason"], "target exited");
}

#[test]
fn ctrl_c_stops_cleanly_with_a_valid_recording() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.idleflow");
    let child = idleflow()
        .args(["record", "-o"])
        .arg(&rec)
        .args(["--", "sleep", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let t0 = Instant::now();
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "stopping took {:?}",
        t0.elapsed()
    );
    // sleep died of the SIGINT passed on to it: 128 + 2.
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let r = report_json(&rec);
    assert_eq!(r["stop_reason"], "interrupted");
    assert!(u(&r, "duration_ns") > 500_000_000);
}

#[test]
fn without_privileges_recording_says_what_is_needed_and_writes_nothing() {
    let Some(_m) = machine() else { return };
    let (dir, bin) = open_dir_with_idleflow();
    let rec = dir.path().join("r.idleflow");
    let out = run(as_nobody("")
        .arg(&bin)
        .args(["record", "-o"])
        .arg(&rec)
        .args(["--", "true"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("root, or CAP_PERFMON and CAP_BPF"), "{err}");
    assert_eq!(err.lines().count(), 1, "one clear line: {err}");
    // Only the binary's copy: no recording, not even an empty one.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn unknown_options_and_bad_values_are_refused_with_help() {
    let out = run(idleflow().args(["record", "--frobnicate"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--frobnicate"), "{}", stderr(&out));
    let out = run(idleflow().args(["record", "--ring-size", "lots", "--", "true"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("512K or 4M"), "{}", stderr(&out));
    let out = run(idleflow().args(["record", "--duration", "-1"]));
    assert_eq!(out.status.code(), Some(2));
    let out = run(idleflow().args(["record", "--pid", "999999999"]));
    assert!(stderr(&out).contains("no such process"), "{}", stderr(&out));
    let out = run(idleflow().args(["report", "--help"]));
    assert!(
        stdout(&out).contains("kernel%"),
        "report --help explains the columns"
    );
}

#[test]
fn a_ring_size_that_is_not_a_power_of_two_pages_is_refused() {
    let Some(_m) = machine() else { return };
    let out = run(idleflow().args(["record", "--ring-size", "12K", "--", "true"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("power-of-two"), "{}", stderr(&out));
}

#[test]
fn truncated_foreign_and_missing_recordings_are_clear_errors() {
    let Some(_m) = machine() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.idleflow");
    record_sleep(&rec);
    let bytes = std::fs::read(&rec).unwrap();

    // Cut inside its run information: nothing to report.
    let cut = dir.path().join("cut.idleflow");
    std::fs::write(&cut, &bytes[..20]).unwrap();
    let out = run(idleflow().arg("report").arg(&cut));
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("cut.idleflow") && err.contains("truncated"),
        "{err}"
    );
    // Cut anywhere later (a killed recorder, a full disk): read up to its
    // last complete record, with a warning that says so. Here: in the
    // middle of the last record that holds a dispatch (on its own, or
    // with the wake-up before it: format 1.18).
    let last_dispatch = {
        use idleflow_format::{kind, RawRecord};
        let mut r = idleflow_format::Reader::new(&bytes[..]).unwrap();
        let mut last = 0;
        loop {
            let at = r.offset();
            match r.next_raw().unwrap() {
                Some(RawRecord::Other(o))
                    if matches!(
                        o.kind,
                        kind::DISPATCH | kind::DISPATCH_TAGGED | kind::WOKEN_DISPATCH
                    ) =>
                {
                    last = at
                }
                Some(_) => {}
                None => break last,
            }
        }
    };
    let cut_at = last_dispatch as usize + 3;
    std::fs::write(&cut, &bytes[..cut_at]).unwrap();
    let out = run(idleflow().arg("report").arg(&cut));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("WARNING: recording cut short"), "{text}");
    let whole = report_json(&rec);
    let part = report_json(&cut);
    assert_eq!(u(&part, "dispatches") + 1, u(&whole, "dispatches"));
    assert_eq!(part["cut_short"]["offset"].as_u64(), Some(last_dispatch));

    let foreign = dir.path().join("perf.data");
    std::fs::write(&foreign, b"PERFILE2 and more bytes").unwrap();
    let out = run(idleflow().arg("report").arg(&foreign));
    let err = stderr(&out);
    assert!(
        err.contains("perf.data") && err.contains("not an idleflow recording"),
        "{err}"
    );

    let out = run(idleflow()
        .arg("report")
        .arg(dir.path().join("missing.idleflow")));
    assert!(stderr(&out).contains("cannot open"), "{}", stderr(&out));

    // script prints one line per record and agrees with the report's counts.
    let out = run(idleflow().arg("script").arg(&rec));
    assert!(out.status.success());
    let text = stdout(&out);
    let dispatch_lines = text.lines().filter(|l| l.contains(" dispatch ")).count() as u64;
    assert_eq!(dispatch_lines, u(&report_json(&rec), "dispatches"));
    let out = run(idleflow().arg("script").arg(&cut));
    assert!(out.status.success());
    assert!(stderr(&out).contains("cut short"), "{}", stderr(&out));
    let printed = stdout(&out)
        .lines()
        .filter(|l| l.contains(" dispatch "))
        .count() as u64;
    assert_eq!(printed, u(&part, "dispatches"));
}
