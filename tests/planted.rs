//! Nothing a local user plants turns idleflow's privileges against the
//! machine (docs/SECURITY.md): run as root, with `nobody` planting links at
//! every name idleflow uses in a directory everyone can write (sticky, as
//! `/tmp`) and writing, as a hostile recorded program, what idleflow reads
//! (its perf map, its flight recording, the JVM's attach trigger). The
//! victim is a file of root's that nobody may change: after each run its
//! bytes, owner and mode are as before, and the recording goes on.
//!
//! The kernel's own guard (`fs.protected_symlinks`) would hide a hole: it
//! is set to 0 while these tests run, as on many containers, and restored.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use common::flight::wait_for_socket;
use common::*;

/// A sysctl set for the tests' time, restored when dropped.
struct Sysctl {
    path: &'static str,
    old: String,
}

impl Sysctl {
    fn set(path: &'static str, value: &str) -> Sysctl {
        let old = std::fs::read_to_string(path).unwrap().trim().to_string();
        std::fs::write(path, value).unwrap();
        Sysctl { path, old }
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path, &self.old);
    }
}

/// The place of one test: `shared` (mode 1777, like /tmp) where `nobody`
/// plants, and the victim (root's, 0644, in a directory only root reads).
struct Lab {
    _guard: MutexGuard<'static, ()>,
    _symlinks: Sysctl,
    _base: tempfile::TempDir,
    shared: PathBuf,
    victim: PathBuf,
    victim_meta: (u32, u32),
}

const PRECIOUS: &[u8] = b"root's precious file\n";

fn lab() -> Option<Lab> {
    let guard = machine()?;
    let symlinks = Sysctl::set("/proc/sys/fs/protected_symlinks", "0");
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let shared = base.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, PermissionsExt::from_mode(0o1777)).unwrap();
    let secret = base.path().join("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, PermissionsExt::from_mode(0o700)).unwrap();
    let victim = secret.join("victim");
    std::fs::write(&victim, PRECIOUS).unwrap();
    std::fs::set_permissions(&victim, PermissionsExt::from_mode(0o644)).unwrap();
    let m = std::fs::metadata(&victim).unwrap();
    Some(Lab {
        _guard: guard,
        _symlinks: symlinks,
        _base: base,
        shared,
        victim,
        victim_meta: (m.uid(), m.mode()),
    })
}

impl Lab {
    /// `nobody` makes `at` a symbolic link to `to`.
    fn plant_link(&self, to: &Path, at: &Path) {
        let out = run(as_nobody("").arg("ln").arg("-s").arg(to).arg(at));
        assert!(out.status.success(), "ln -s: {}", stderr(&out));
        assert!(std::fs::symlink_metadata(at).unwrap().is_symlink());
    }

    /// `nobody` links the victim at `at`.
    fn plant(&self, at: &Path) {
        self.plant_link(&self.victim, at);
    }

    /// The victim is as it was.
    fn victim_untouched(&self) {
        assert_eq!(
            std::fs::read(&self.victim).unwrap(),
            PRECIOUS,
            "written through a planted link"
        );
        let m = std::fs::metadata(&self.victim).unwrap();
        assert_eq!(
            (m.uid(), m.mode()),
            self.victim_meta,
            "owner or mode changed"
        );
    }

    fn at(&self, name: &str) -> PathBuf {
        self.shared.join(name)
    }
}

/// `path` is a regular file (not a link), 0600, owned by `uid`.
fn private_file(path: &Path, uid: u32) {
    let m = std::fs::symlink_metadata(path).unwrap();
    assert!(m.is_file(), "{} is not a regular file", path.display());
    assert_eq!(m.mode() & 0o7777, 0o600, "{}", path.display());
    assert_eq!(m.uid(), uid, "{}", path.display());
    assert_eq!(m.nlink(), 1, "{}", path.display());
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_recording_replaces_the_links_planted_at_its_names_and_writes_through_none() {
    let Some(lab) = lab() else { return };
    // Every name an earlier idleflow used beside a recording, and the final
    // one: the temporary file, the deferred merge's spool, the resolver's
    // and the dump amender's copies.
    let names = [
        "x.idleflow",
        "x.idleflow.partial",
        "x.idleflow.partial.spool",
        "x.idleflow.resolving",
        "x.idleflow.amending",
    ];
    for n in names {
        lab.plant(&lab.at(n));
    }
    // Under sudo the recording goes to the user who ran it: given on the
    // descriptor, not through the planted name.
    let out = run(idleflow()
        .env("IDLEFLOW_DEFER", "1")
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .args(["record", "-q", "-o"])
        .arg(lab.at("x.idleflow"))
        .args(["--", "sleep", "0.3"]));
    assert!(out.status.success(), "{}", stderr(&out));
    lab.victim_untouched();
    private_file(&lab.at("x.idleflow"), 65534);
    for n in &names[1..] {
        assert!(
            std::fs::symlink_metadata(lab.at(n)).unwrap().is_symlink(),
            "{n}: nobody's link is left as it was"
        );
    }
    assert!(
        !names_in(&lab.shared)
            .iter()
            .any(|n| n.ends_with(".partial") && n.len() > 20),
        "no temporary file left: {:?}",
        names_in(&lab.shared)
    );
    let r = report_json(&lab.at("x.idleflow"));
    assert!(u(&r, "dispatches") > 0);

    // A hard link to nobody's own file at the final name: the name is
    // replaced, nobody's file keeps its bytes.
    let mine = lab.at("mine");
    let o = run(as_nobody("")
        .args(["sh", "-c", "printf mine > \"$1\" && ln \"$1\" \"$2\"", "-"])
        .arg(&mine)
        .arg(lab.at("y.idleflow")));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = run(idleflow()
        .args(["record", "-q", "-o"])
        .arg(lab.at("y.idleflow"))
        .args(["--", "true"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read(&mine).unwrap(), b"mine");
    assert_eq!(std::fs::metadata(&mine).unwrap().nlink(), 1);
    private_file(&lab.at("y.idleflow"), 0);
}

#[test]
fn a_recordings_temporary_name_is_unguessable_and_made_new() {
    let Some(lab) = lab() else { return };
    let mut seen = Vec::new();
    for _ in 0..2 {
        let mut rec = idleflow()
            .args(["record", "-q", "-o"])
            .arg(lab.at("z.idleflow"))
            .args(["--", "sleep", "1"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t = Instant::now();
        let temp = loop {
            if let Some(n) = names_in(&lab.shared)
                .into_iter()
                .find(|n| n.starts_with("z.idleflow.") && n.ends_with(".partial"))
            {
                break n;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "no temporary file");
            std::thread::sleep(Duration::from_millis(20));
        };
        private_file(&lab.at(&temp), 0);
        let random = &temp["z.idleflow.".len()..temp.len() - ".partial".len()];
        assert_eq!(random.len(), 8, "{temp}");
        assert!(
            random
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase()),
            "{temp}"
        );
        seen.push(temp);
        assert!(rec.wait().unwrap().success());
    }
    assert_ne!(seen[0], seen[1], "the same temporary name twice");
    private_file(&lab.at("z.idleflow"), 0);
}

#[test]
fn a_directory_others_can_write_is_refused_unless_sticky() {
    let Some(lab) = lab() else { return };
    let open = lab.at("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, PermissionsExt::from_mode(0o777)).unwrap();
    let out = run(idleflow()
        .args(["record", "-q", "-o"])
        .arg(open.join("x.idleflow"))
        .args(["--", "true"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("is writable by other users (mode 0777) and not sticky"),
        "{err}"
    );
    assert!(err.contains("mkdir -m 700"), "{err}");
    assert!(names_in(&open).is_empty(), "{:?}", names_in(&open));
    // The flight recorder, likewise; a sticky one is taken, and said.
    let out = run(idleflow()
        .args(["record", "--flight", "5s", "-o"])
        .arg(&open)
        .args(["--", "true"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("writable by other users"),
        "{}",
        stderr(&out)
    );
    let out = run(idleflow()
        .args(["record", "--flight", "5s", "-o"])
        .arg(&lab.shared)
        .args(["--", "true"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("is writable by other users (sticky)") && err.contains("mode 0700"),
        "{err}"
    );
}

#[test]
fn a_flight_recorders_dump_replaces_links_planted_at_its_spare_and_dump_names() {
    let Some(lab) = lab() else { return };
    let rec = idleflow()
        .args(["record", "--flight", "10s", "--no-stacks", "-o"])
        .arg(&lab.shared)
        .args(["--", "sleep", "4"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = rec.id();
    // The names an earlier recorder used, which anyone could compute.
    for n in [format!(".spare-{pid}"), format!(".spare-{pid}.partial")] {
        lab.plant(&lab.at(&n));
    }
    wait_for_socket(pid);
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: kill has no memory effects.
    unsafe { libc::kill(pid as i32, libc::SIGUSR2) };
    let o = rec.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    lab.victim_untouched();
    let dumps: Vec<String> = names_in(&lab.shared)
        .into_iter()
        .filter(|n| n.starts_with("idleflow-") && n.ends_with(".idleflow"))
        .collect();
    assert_eq!(dumps.len(), 1, "{}", stderr(&o));
    private_file(&lab.at(&dumps[0]), 0);
    assert!(u(&report_json(&lab.at(&dumps[0])), "dispatches") > 0);
    // Nobody's links are left, the recorder's own spare is gone.
    let left = names_in(&lab.shared);
    assert!(
        left.iter()
            .filter(|n| n.starts_with(".spare-"))
            .all(|n| std::fs::symlink_metadata(lab.at(n)).unwrap().is_symlink()),
        "{left:?}"
    );
}

#[test]
fn outputs_written_with_o_replace_links_planted_at_their_names() {
    let Some(lab) = lab() else { return };
    let rec = lab.at("r.idleflow");
    record_sleep(&rec);
    let cases: [(&str, Vec<&str>); 5] = [
        ("report.txt", vec!["report"]),
        ("report.html", vec!["report", "--format", "html"]),
        ("idle.svg", vec!["flamegraph"]),
        ("idle.pb.gz", vec!["export", "--format", "pprof"]),
        ("diff.svg", vec!["diff", "--svg"]),
    ];
    for (name, args) in cases {
        let out_path = lab.at(name);
        lab.plant(&out_path);
        let mut c = idleflow();
        c.args(&args);
        if args[0] == "diff" {
            c.arg(&rec);
        }
        c.arg(&rec).arg("-o").arg(&out_path);
        let o = run(&mut c);
        // diff --svg of a recording with itself may have nothing to draw;
        // what matters is that nothing was written through the link.
        if args[0] != "diff" {
            assert!(o.status.success(), "{name}: {}", stderr(&o));
            private_file(&out_path, 0);
            assert!(std::fs::metadata(&out_path).unwrap().len() > 0, "{name}");
        }
        lab.victim_untouched();
    }
    // A terminal or pipe is still written as it is.
    let o = run(idleflow()
        .arg("report")
        .arg(&rec)
        .args(["-o", "/dev/stdout"]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("idle"), "{}", stdout(&o));
    // A recording is renamed into place: a link root made (`/dev/stdout`)
    // is refused with a clear error, never replaced.
    let o = run(idleflow().args(["record", "-q", "-o", "/dev/stdout", "--", "true"]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("a symbolic link"), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata("/dev/stdout")
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn the_history_refuses_a_folder_others_can_write_and_a_linked_store() {
    let Some(lab) = lab() else { return };
    let rec = lab.at("r.idleflow");
    record_sleep(&rec);
    let store = lab.at("h.sqlite");
    lab.plant(&store);
    lab.plant(&lab.at("h.sqlite-wal"));
    let o = run(idleflow()
        .args(["history", "add"])
        .arg(&rec)
        .args(["--job", "j", "--history"])
        .arg(&store));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("writable by other users"),
        "{}",
        stderr(&o)
    );
    lab.victim_untouched();
    // In a private folder, a store planted as a link is not opened.
    let private = lab._base.path().join("private");
    std::fs::create_dir(&private).unwrap();
    let linked = private.join("h.sqlite");
    std::os::unix::fs::symlink(&lab.victim, &linked).unwrap();
    let o = run(idleflow()
        .args(["history", "add"])
        .arg(&rec)
        .args(["--job", "j", "--history"])
        .arg(&linked));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    lab.victim_untouched();
}

/// A JVM run by `nobody` in `cwd` (a directory of nobody's), waiting in
/// `Waits convoy` for `seconds`; the classes copied where nobody reads them.
fn nobodys_jvm(lab: &Lab, cwd: &Path, seconds: &str) -> std::process::Child {
    let classes = java_examples();
    let readable = lab._base.path().join("classes");
    if !readable.exists() {
        std::fs::create_dir(&readable).unwrap();
        for e in std::fs::read_dir(classes.path()).unwrap().flatten() {
            std::fs::copy(e.path(), readable.join(e.file_name())).unwrap();
        }
    }
    let mut c = as_nobody("");
    c.arg("/usr/lib/jvm/java-17-openjdk-amd64/bin/java")
        .arg("-cp")
        .arg(&readable)
        .args(["Waits", "convoy", seconds])
        .current_dir(cwd)
        .stdout(Stdio::null());
    let jvm = c.spawn().unwrap();
    // Its threads started (the attach listener answers from then on).
    std::thread::sleep(Duration::from_millis(1500));
    jvm
}

/// A directory of nobody's (0755) under the lab.
fn nobodys_dir(lab: &Lab, name: &str) -> PathBuf {
    let d = lab._base.path().join(name);
    std::fs::create_dir(&d).unwrap();
    std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
    d
}

#[test]
fn a_hostile_jvms_perf_map_is_refused_with_a_line_and_the_recording_goes_on() {
    let Some(lab) = lab() else { return };
    let cwd = nobodys_dir(&lab, "jvm");
    let mut jvm = nobodys_jvm(&lab, &cwd, "60");
    let pid = jvm.id();
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    // What the JVM's user puts where idleflow reads the JIT's names.
    type Plant = fn(&Lab, &Path);
    let hostile: [(&str, Plant, &str); 5] = [
        (
            "a link to root's file",
            |lab, map| lab.plant(map),
            "is a symbolic link",
        ),
        (
            "a link to /dev/zero",
            |lab, map| lab.plant_link(Path::new("/dev/zero"), map),
            "is a symbolic link",
        ),
        (
            "a FIFO",
            |_, map| {
                let o = run(as_nobody("").arg("mkfifo").arg(map));
                assert!(o.status.success(), "{}", stderr(&o));
            },
            "not a regular file (a FIFO)",
        ),
        (
            "a 10-GB file",
            |_, map| {
                let o = run(as_nobody("").args(["truncate", "-s", "10G"]).arg(map));
                assert!(o.status.success(), "{}", stderr(&o));
            },
            "bytes, over the bound of",
        ),
        (
            "another user's file",
            |_, map| {
                std::fs::write(map, b"7f0000000000 100 Evil.name\n").unwrap();
                std::os::unix::fs::chown(map, Some(1), Some(1)).unwrap();
            },
            "is owned by uid 1",
        ),
    ];
    for (what, plant, said) in hostile {
        let _ = std::fs::remove_file(&map);
        let dir = tempfile::tempdir().unwrap();
        let rec = dir.path().join("r.idleflow");
        let mut child = idleflow()
            .args(["record", "-q", "--no-agent", "--duration", "2"])
            .args(["--pid", &pid.to_string(), "-o"])
            .arg(&rec)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Planted once the recording runs: newer than its start.
        std::thread::sleep(Duration::from_millis(700));
        plant(&lab, &map);
        let t = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{what}: the recorder hangs"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let o = child.wait_with_output().unwrap();
        assert!(status.success(), "{what}: {}", stderr(&o));
        lab.victim_untouched();
        let text = serde_json::to_string(&report_json(&rec)).unwrap();
        let line = format!("perf map of {pid} ignored: {}", map.display());
        assert!(
            text.contains(&line) && text.contains(said),
            "{what}: no line {line:?} … {said:?} in the report"
        );
        assert!(!text.contains("Evil.name"), "{what}");
    }
    let _ = std::fs::remove_file(&map);
    let _ = jvm.kill();
    let _ = jvm.wait();
}

#[test]
fn a_hostile_jvms_planted_attach_trigger_and_flight_recording_are_not_followed() {
    let Some(lab) = lab() else { return };
    let cwd = nobodys_dir(&lab, "jvm2");
    let mut jvm = nobodys_jvm(&lab, &cwd, "60");
    let pid = jvm.id();
    // The trigger file idleflow makes in the JVM's working directory to
    // start its attach listener: nobody has put a link there.
    lab.plant(&cwd.join(format!(".attach_pid{pid}")));
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("r.idleflow");
    let child = idleflow()
        .args(["record", "-q", "--duration", "4"])
        .args(["--pid", &pid.to_string(), "-o"])
        .arg(&rec)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The JVM's flight recording goes to `hotspot-pid-PID-id-0-attach.jfr`
    // in the JVMs' shared directory: nobody links it to root's file first.
    let t = Instant::now();
    let out = loop {
        let found = std::fs::read_dir("/tmp")
            .unwrap()
            .flatten()
            .map(|e| e.path().join("out"))
            .filter(|p| {
                p.parent()
                    .and_then(|d| d.file_name())
                    .is_some_and(|n| n.to_string_lossy().starts_with("idleflow-jfr-"))
                    && p.is_dir()
            })
            .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
        if let Some(o) = found {
            break o;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no JFR directory");
        std::thread::sleep(Duration::from_millis(20));
    };
    let jfr = out.join(format!("hotspot-pid-{pid}-id-0-attach.jfr"));
    lab.plant(&jfr);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    lab.victim_untouched();
    // The recording is whole; the JVM's file, a link, was not read.
    let r = report_json(&rec);
    assert!(u(&r, "dispatches") > 0);
    let text = serde_json::to_string(&r).unwrap();
    assert!(
        !text.contains("root's precious file"),
        "the victim's bytes reached the recording"
    );
    let _ = jvm.kill();
    let _ = jvm.wait();
}
