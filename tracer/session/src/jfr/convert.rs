//! Reading a JVM's flight recording into the recording, in a child
//! process: the parser reads a file a JVM wrote, perhaps damaged (a JVM
//! killed mid-chunk), which may make it fail, loop or abort; the child
//! ([`convert_child`], run as `idleflow __jfr-convert`) writes the records
//! it converts into a small recording of their own, which the parent copies
//! into the real one ([`Waits::convert_isolated`]) whatever became of the
//! child.
//!
//! Invariant: the parent never parses a `.jfr` itself, and never waits for
//! a child longer than [`convert_timeout`]; the records a child completed
//! before it failed are kept.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use idleflow_format::Record;

use super::Waits;
use crate::SessionError;

/// The subcommand of the idleflow executable that runs [`convert_child`]
/// with the arguments of [`ConvertJob::args`].
pub const CONVERT_SUBCOMMAND: &str = "__jfr-convert";

/// What a converter child converts, in the order of its arguments.
#[derive(Debug, Clone)]
pub struct ConvertJob {
    /// The JVM's `.jfr`.
    pub input: PathBuf,
    /// Where to write the records (an idleflow recording of them alone).
    pub output: PathBuf,
    /// The JVM's pid.
    pub pid: u32,
    /// `idleflow_jfr::Options::offset_ns`.
    pub offset_ns: i64,
    /// The threshold the JVM recorded with, ns.
    pub threshold_ns: u64,
    /// The threshold of its contended monitor enters, ns.
    pub monitor_threshold_ns: u64,
    /// When it recorded every wait (`idleflow_jfr::Options::all_waits`):
    /// `FROM-TO,…` in ns on the recording's clock, `-` for none.
    pub all_waits: String,
    /// The ephemeral port range's first port.
    pub ports_from: u16,
    /// Its last port.
    pub ports_to: u16,
    /// The JVM's user, who may own its file besides root and idleflow's
    /// user (`idleflow_format::files::open_untrusted`); None if unknown.
    pub owner: Option<u32>,
}

/// The longest flight recording a converter reads (a JVM's file under
/// idleflow's settings is a few MB a minute).
pub const JFR_LIMIT: u64 = 4 << 30;

impl ConvertJob {
    /// The child's arguments after [`CONVERT_SUBCOMMAND`].
    pub fn args(&self) -> Vec<OsString> {
        let mut args = vec![self.input.clone().into(), self.output.clone().into()];
        args.extend(
            [
                self.pid.to_string(),
                self.offset_ns.to_string(),
                self.threshold_ns.to_string(),
                self.monitor_threshold_ns.to_string(),
                self.all_waits.clone(),
                self.ports_from.to_string(),
                self.ports_to.to_string(),
                self.owner.map_or("-".into(), |u| u.to_string()),
            ]
            .map(OsString::from),
        );
        args
    }

    /// The job from a converter child's arguments (what [`ConvertJob::args`]
    /// gave, in its order).
    pub fn from_args(args: &[OsString]) -> Result<Self, SessionError> {
        let bad = |what: &str| SessionError::ConvertArgs(format!("{what} expected"));
        let [input, output, rest @ ..] = args else {
            return Err(bad("the input and output files"));
        };
        let text: Vec<&str> = rest.iter().map(|a| a.to_str().unwrap_or("")).collect();
        let [pid, offset, threshold, monitor, all_waits, from, to, owner] = text[..] else {
            return Err(bad("8 values after the files"));
        };
        fn number<T: std::str::FromStr>(name: &str, v: &str) -> Result<T, SessionError> {
            v.parse()
                .map_err(|_| SessionError::ConvertArgs(format!("{name} is not a number: {v:?}")))
        }
        Ok(ConvertJob {
            input: input.into(),
            output: output.into(),
            pid: number("pid", pid)?,
            offset_ns: number("offset_ns", offset)?,
            threshold_ns: number("threshold_ns", threshold)?,
            monitor_threshold_ns: number("monitor_threshold_ns", monitor)?,
            all_waits: all_waits.to_string(),
            ports_from: number("ports_from", from)?,
            ports_to: number("ports_to", to)?,
            owner: match owner {
                "-" => None,
                o => Some(number("owner", o)?),
            },
        })
    }
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
pub(super) fn pid_of(name: &str) -> Option<u32> {
    name.strip_prefix("hotspot-pid-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// How long a converter child may take: a minute, and a second per MiB.
fn convert_timeout(bytes: u64) -> Duration {
    Duration::from_secs(60 + bytes / (1 << 20))
}

/// Spans of the recording's clock as `__jfr-convert` takes them:
/// `FROM-TO,…`, `-` for none.
fn format_spans(spans: &[(u64, u64)]) -> String {
    if spans.is_empty() {
        return "-".into();
    }
    let s: Vec<String> = spans.iter().map(|(a, b)| format!("{a}-{b}")).collect();
    s.join(",")
}

/// The inverse of [`format_spans`].
fn parse_spans(text: &str) -> Result<Vec<(u64, u64)>, SessionError> {
    if text == "-" {
        return Ok(Vec::new());
    }
    let number = |n: &str| n.parse().map_err(|e| SessionError::Spans(format!("{e}")));
    text.split(',')
        .map(|span| {
            let (a, b) = span
                .split_once('-')
                .ok_or_else(|| SessionError::Spans(format!("a span is FROM-TO, not {span:?}")))?;
            Ok((number(a)?, number(b)?))
        })
        .collect()
}

/// `idleflow __jfr-convert`: converts one `.jfr` into a recording of its
/// wait records alone (read by `Waits::collect` in the parent process).
pub fn convert_child(args: &ConvertJob) -> Result<(), SessionError> {
    use idleflow_format::{RunInfo, RunSummary, Writer};
    // New in the parent's private directory, never through a link: the
    // parent reads it by name, even when this child was killed mid-way.
    let file = idleflow_format::files::Dir::of(&args.output)
        .map_err(std::io::Error::from)
        .and_then(|(dir, name)| dir.create_new(&name))
        .map_err(SessionError::io(format!(
            "cannot create {}",
            args.output.display()
        )))?;
    let mut w = Writer::new(
        std::io::BufWriter::new(file),
        &RunInfo::minimal(Vec::new(), 0),
    )?;
    let opts = idleflow_jfr::Options {
        pid: args.pid,
        offset_ns: args.offset_ns,
        thresholds: idleflow_jfr::Thresholds {
            wait_ns: args.threshold_ns,
            monitor_enter_ns: args.monitor_threshold_ns,
        },
        all_waits: parse_spans(&args.all_waits)?,
        ephemeral_ports: (args.ports_from, args.ports_to),
    };
    // Written by the JVM, perhaps a hostile one: never through a link, a
    // regular file of root's, idleflow's or the JVM's user, bounded.
    let owners: Vec<u32> = args.owner.into_iter().collect();
    let (input, len) = idleflow_format::files::open_untrusted(&args.input, &owners, JFR_LIMIT)
        .map_err(|e| SessionError::io("refused")(std::io::Error::other(e)))?;
    let head = idleflow_jfr::convert_from(
        std::io::BufReader::new(input),
        &args.input.display().to_string(),
        len,
        &opts,
        |r| w.write(&r),
    )?;
    w.write(&Record::JvmWaits(Box::new(head)))?;
    w.finish(&RunSummary::default())?;
    Ok(())
}

impl Waits {
    /// Converts JVM `pid`'s file in a child process (`__jfr-convert`: a
    /// damaged file may make the parser fail, loop or abort; the child is
    /// killed after [`convert_timeout`]) and hands its records to `sink`.
    /// Returns what was read, or `None` if the child failed (the records
    /// it completed are handed on all the same).
    pub(super) fn convert_isolated(
        &self,
        pid: u32,
        owner: Option<u32>,
        path: &std::path::Path,
        offset_ns: i64,
        all_waits: &[(u64, u64)],
        sink: &mut dyn FnMut(&Record) -> Result<(), SessionError>,
    ) -> Result<Option<idleflow_format::JvmWaits>, SessionError> {
        let n = super::CONVERSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let out = self.dir.path().join(format!("waits-{pid}-{n}.idleflow"));
        let (ports_from, ports_to) = ephemeral_ports();
        let job = ConvertJob {
            input: path.to_path_buf(),
            output: out.clone(),
            pid,
            offset_ns,
            threshold_ns: self.thresholds.wait_ns,
            monitor_threshold_ns: self.thresholds.monitor_enter_ns,
            all_waits: format_spans(all_waits),
            ports_from,
            ports_to,
            owner,
        };
        let exe = std::env::current_exe()
            .map_err(SessionError::io("cannot find the idleflow executable"))?;
        let mut child = std::process::Command::new(exe)
            .arg(CONVERT_SUBCOMMAND)
            .args(job.args())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(SessionError::io(
                "cannot start the flight-recording converter",
            ))?;
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let deadline = std::time::Instant::now() + convert_timeout(bytes);
        let ok = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status.success(),
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break false;
                }
            }
        };
        let mut head = None;
        if let Ok(file) = std::fs::File::open(&out) {
            if let Ok(mut reader) = idleflow_format::Reader::new(std::io::BufReader::new(file)) {
                while let Ok(Some(rec)) = reader.next_complete_record() {
                    match rec {
                        Record::JvmWaits(h) => head = Some(*h),
                        r => sink(&r)?,
                    }
                }
            }
        }
        let _ = std::fs::remove_file(&out);
        Ok(if ok { head } else { None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_converter_child_reads_the_arguments_the_session_gives_it() {
        let sent = ConvertJob {
            input: "/tmp/a b.jfr".into(),
            output: "/tmp/out.idleflow".into(),
            pid: 42,
            offset_ns: -17,
            threshold_ns: 10_000_000,
            monitor_threshold_ns: 0,
            all_waits: "1-2,30-40".into(),
            ports_from: 32768,
            ports_to: 60999,
            owner: Some(1000),
        };
        let read = ConvertJob::from_args(&sent.args()).unwrap();
        assert_eq!(format!("{read:?}"), format!("{sent:?}"));
        let mut args = sent.args();
        args[2] = "forty-two".into();
        let e = ConvertJob::from_args(&args).unwrap_err().to_string();
        assert_eq!(e, "__jfr-convert: pid is not a number: \"forty-two\"");
        assert!(ConvertJob::from_args(&args[..5]).is_err());
    }

    #[test]
    fn jfr_file_names_give_the_pid() {
        assert_eq!(
            pid_of("hotspot-pid-20915-id-1-2026_11_23_03_32_14.jfr"),
            Some(20915)
        );
        assert_eq!(pid_of("other.jfr"), None);
    }

    #[test]
    fn spans_pass_to_the_converter_and_back() {
        for spans in [vec![], vec![(1, 2)], vec![(10, 20), (30, 5_000_000_000)]] {
            assert_eq!(parse_spans(&format_spans(&spans)).unwrap(), spans);
        }
        assert!(parse_spans("12").is_err());
        assert!(parse_spans("1-x").is_err());
    }
}
