//! `record --java waits`: turn on the flight recorder (JFR) of every JVM the
//! recorded command starts, with idleflow's own settings and recording
//! name, and, once the window has closed, read what each JVM wrote into the
//! recording ([`idleflow_jfr`]).
//!
//! The JVMs find their options in `JAVA_TOOL_OPTIONS`: a recording named
//! `idleflow` (so it never collides with one the user started) with a
//! settings file that enables only the wait events, with stacks, above the
//! threshold, dumped at the JVM's exit into a private directory, one file
//! per JVM (`hotspot-pid-PID-…jfr`). That directory is writable by the
//! JVMs of any user (a service that drops privileges still writes its
//! file) but not listable, and sticky, so no user can touch another's file.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use anyhow::Context;
use idleflow_format::{Record, WaitReason};
use idleflow_tracer::Recorder;

/// JFR's recording name for idleflow's recording.
const RECORDING_NAME: &str = "idleflow";

/// The flight recorder's part of a recording in progress.
pub struct Waits {
    dir: tempfile::TempDir,
    /// This part of the command's `JAVA_TOOL_OPTIONS`.
    pub java_options: String,
    threshold_ns: u64,
}

/// The settings file: the wait events, with stacks, at `threshold`.
fn settings(threshold_ns: u64) -> String {
    let threshold = format!("{} us", threshold_ns / 1000);
    let mut s = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <configuration version=\"2.0\" label=\"idleflow\" \
         description=\"idleflow: the waits of Java threads, with stacks\" provider=\"idleflow\">\n",
    );
    for r in WaitReason::ALL {
        s.push_str(&format!(
            "  <event name=\"{}\"><setting name=\"enabled\">true</setting>\
             <setting name=\"stackTrace\">true</setting>\
             <setting name=\"threshold\">{threshold}</setting></event>\n",
            r.jfr_event()
        ));
    }
    s.push_str("</configuration>\n");
    s
}

/// Prepares the directory and the options for JVMs waits `threshold_ms` or longer.
pub fn prepare(threshold_ms: f64) -> anyhow::Result<Waits> {
    if !(threshold_ms.is_finite() && threshold_ms >= 0.0) {
        anyhow::bail!("--wait-threshold must be 0 or more ms, not {threshold_ms}");
    }
    let threshold_ns = (threshold_ms * 1e6).round() as u64;
    let dir = tempfile::Builder::new()
        .prefix("idleflow-jfr-")
        .tempdir()
        .context("cannot create a directory for the JVMs' flight recordings")?;
    crate::agent::check_plain(dir.path(), "the temporary directory")?;
    let jfc = dir.path().join("idleflow.jfc");
    std::fs::write(&jfc, settings(threshold_ns))
        .with_context(|| format!("cannot write {}", jfc.display()))?;
    std::fs::set_permissions(&jfc, std::fs::Permissions::from_mode(0o644))
        .with_context(|| format!("cannot set the permissions of {}", jfc.display()))?;
    let out = dir.path().join("out");
    std::fs::create_dir(&out).with_context(|| format!("cannot create {}", out.display()))?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
        .with_context(|| format!("cannot set the permissions of {}", dir.path().display()))?;
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o1733))
        .with_context(|| format!("cannot set the permissions of {}", out.display()))?;
    // `filename` a directory: each JVM writes `hotspot-pid-PID-id-N-TIME.jfr`
    // there (JDK 17 does not expand %p). JFR's start-up lines would mix
    // with the program's output: only errors are logged.
    let java_options = format!(
        "-Xlog:jfr+startup=error -XX:StartFlightRecording=name={RECORDING_NAME},settings={},filename={},dumponexit=true",
        jfc.display(),
        out.display()
    );
    Ok(Waits {
        dir,
        java_options,
        threshold_ns,
    })
}

/// This machine's ephemeral port range (Linux's default if unreadable).
fn ephemeral_ports() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|p| p.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999))
}

/// The pid in a JFR file name `hotspot-pid-PID-id-N-TIME.jfr`.
fn pid_of(name: &str) -> Option<u32> {
    name.strip_prefix("hotspot-pid-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

impl Waits {
    /// Where the JVMs write their files.
    fn out_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// The file JVM `pid` writes when idleflow stops its recording.
    fn attach_file(&self, pid: u32) -> PathBuf {
        self.out_dir()
            .join(format!("hotspot-pid-{pid}-id-0-attach.jfr"))
    }

    /// Starts idleflow's flight recording in the running JVM `pid`, through
    /// its attach mechanism; it is written to this directory when
    /// [`Waits::stop_in`] stops it or the JVM exits.
    pub fn start_in(&self, pid: u32) -> Result<(), crate::attach::AttachError> {
        crate::attach::jcmd(
            pid,
            &format!(
                "JFR.start name={RECORDING_NAME} settings={} filename={} dumponexit=true",
                self.dir.path().join("idleflow.jfc").display(),
                self.attach_file(pid).display()
            ),
        )
        .map(drop)
    }

    /// Stops idleflow's flight recording in JVM `pid` (started by
    /// [`Waits::start_in`] or by `JAVA_TOOL_OPTIONS`), which writes it.
    pub fn stop_in(&self, pid: u32) -> Result<(), crate::attach::AttachError> {
        crate::attach::jcmd(
            pid,
            &format!(
                "JFR.stop name={RECORDING_NAME} filename={}",
                self.attach_file(pid).display()
            ),
        )
        .map(drop)
    }

    /// Reads every JVM's file into the recording (after
    /// [`Recorder::stop`]); returns a line for each JVM that left none or
    /// whose file could not be read whole, for the report.
    pub fn collect(
        &self,
        recorder: &mut Recorder,
        offset_ns: i64,
        quiet: bool,
    ) -> anyhow::Result<Vec<String>> {
        let mut notes = Vec::new();
        let mut files: Vec<(u32, PathBuf)> = std::fs::read_dir(self.out_dir())
            .with_context(|| format!("cannot read {}", self.out_dir().display()))?
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Some((pid_of(&name)?, e.path()))
            })
            .filter(|(_, p)| p.extension().is_some_and(|x| x == "jfr"))
            .collect();
        files.sort();
        for (pid, path) in files {
            let opts = idleflow_jfr::Options {
                pid,
                offset_ns,
                threshold_ns: self.threshold_ns,
                ephemeral_ports: ephemeral_ports(),
            };
            let started = std::time::Instant::now();
            let head = idleflow_jfr::convert(&path, &opts, |r| recorder.write_after(&r))
                .with_context(|| format!("reading the flight recording of JVM {pid}"))?;
            if !quiet {
                eprintln!(
                    "idleflow: JVM {pid}: {} waits of {} events read from its flight recording ({:.1} MiB) in {:.2} s",
                    head.waits,
                    head.events,
                    head.file_bytes as f64 / (1 << 20) as f64,
                    started.elapsed().as_secs_f64()
                );
            }
            for n in &head.notes {
                notes.push(format!("JVM {pid}: flight recording: {n}"));
            }
            recorder.write_after(&Record::JvmWaits(Box::new(head)))?;
        }
        Ok(notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jfr_file_names_give_the_pid() {
        assert_eq!(
            pid_of("hotspot-pid-20915-id-1-2026_11_23_03_32_14.jfr"),
            Some(20915)
        );
        assert_eq!(pid_of("other.jfr"), None);
    }

    #[test]
    fn settings_enable_every_wait_with_stacks_at_the_threshold() {
        let s = settings(1_500_000);
        for r in WaitReason::ALL {
            assert!(s.contains(&format!("\"{}\"", r.jfr_event())));
        }
        assert_eq!(
            s.matches("<setting name=\"threshold\">1500 us</setting>")
                .count(),
            9
        );
        assert_eq!(s.matches("stackTrace\">true").count(), 9);
    }
}
