//! What the recorder reads from `/proc` and `/sys`: online CPUs, the
//! kernel's own idle counters (`/proc/stat`), the threads that exist when
//! recording starts, their processes' executable mappings, and the
//! machine's identity.

use std::fs;
use std::io;

use idleflow_format::ProcStatCpu;

/// Parses a CPU list such as `0-3,5,7-8`.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// The machine's pressure stall totals (`/proc/pressure/{cpu,io,memory}`,
/// µs); a resource the kernel does not show (no PSI) is `None`.
pub fn pressure() -> crate::flight::policy::Pressure {
    let read = |r: &str| fs::read_to_string(format!("/proc/pressure/{r}")).ok();
    let (cpu, io, memory) = (read("cpu"), read("io"), read("memory"));
    let total = |text: &Option<String>, kind: &str| {
        crate::flight::policy::Pressure::total(text.as_deref()?, kind)
    };
    crate::flight::policy::Pressure {
        cpu_some: total(&cpu, "some"),
        io_some: total(&io, "some"),
        io_full: total(&io, "full"),
        memory_some: total(&memory, "some"),
        memory_full: total(&memory, "full"),
    }
}

/// The online CPUs, ascending.
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let s = fs::read_to_string("/sys/devices/system/cpu/online")?;
    parse_cpu_list(&s).ok_or_else(|| io::Error::other(format!("cannot parse CPU list {s:?}")))
}

/// The `idle` and `iowait` counters of every `cpuN` line of `/proc/stat`.
pub fn proc_stat() -> io::Result<Vec<ProcStatCpu>> {
    Ok(parse_proc_stat(&fs::read_to_string("/proc/stat")?))
}

/// Parses the text of `/proc/stat`.
pub fn parse_proc_stat(text: &str) -> Vec<ProcStatCpu> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let cpu = f.next()?.strip_prefix("cpu")?.parse().ok()?;
            let v: Vec<u64> = f.take(5).filter_map(|x| x.parse().ok()).collect();
            Some(ProcStatCpu {
                cpu,
                idle: *v.get(3)?,
                iowait: *v.get(4)?,
            })
        })
        .collect()
}

/// An executable file mapping of a process, as `/proc/PID/maps` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecMap {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Offset in the file of `start`.
    pub pgoff: u64,
    /// The file's inode (0 for pseudo paths).
    pub ino: u64,
    /// The file, or a pseudo path such as `[vdso]`.
    pub path: String,
}

/// The executable mappings of `pid` that have a path (empty if the process
/// is gone or its maps cannot be read).
pub fn exec_maps(pid: u32) -> Vec<ExecMap> {
    fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|t| parse_exec_maps(&t))
        .unwrap_or_default()
}

/// Parses the text of `/proc/PID/maps`: `start-end perms offset dev inode
/// path`, keeping the executable lines with a path.
pub fn parse_exec_maps(text: &str) -> Vec<ExecMap> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(6, ' ');
            let (start, end) = f.next()?.split_once('-')?;
            let perms = f.next()?;
            let pgoff = f.next()?;
            let _dev = f.next()?;
            let ino = f.next()?;
            let path = f.next()?.trim_start();
            if perms.as_bytes().get(2) != Some(&b'x') || path.is_empty() {
                return None;
            }
            Some(ExecMap {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                pgoff: u64::from_str_radix(pgoff, 16).ok()?,
                ino: ino.parse().ok()?,
                path: path.trim_end_matches(" (deleted)").to_string(),
            })
        })
        .collect()
}

/// `/proc/stat`'s tick rate.
pub fn user_hz() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

/// A thread found in `/proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcThread {
    /// Thread id.
    pub tid: u32,
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Name.
    pub comm: String,
}

/// Every thread now in `/proc`. Threads that exit during the scan are skipped.
pub fn threads() -> Vec<ProcThread> {
    let mut out = Vec::new();
    let Ok(procs) = fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let ppid = parent(pid).unwrap_or(0);
        out.extend(tasks(pid).into_iter().map(|(tid, comm)| ProcThread {
            tid,
            pid,
            ppid,
            comm,
        }));
    }
    out
}

/// The threads of process `pid` now: (tid, name). Threads that exit during
/// the scan are skipped; none if the process is gone.
pub fn tasks(pid: u32) -> Vec<(u32, String)> {
    task_ids(pid)
        .into_iter()
        .filter_map(|tid| Some((tid, thread_name(pid, tid)?)))
        .collect()
}

/// The thread ids of process `pid` now (one directory listing); none if the
/// process is gone.
pub fn task_ids(pid: u32) -> Vec<u32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<u32>().ok())
        .collect()
}

/// The name of thread `tid` of process `pid` now (its `comm`), if it lives.
pub fn thread_name(pid: u32, tid: u32) -> Option<String> {
    let comm = fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
    Some(comm.trim_end().to_string())
}

/// How many times the threads of process `pid` now alive whose name
/// `counts` accepts have left their CPU to wait (the `Name` and
/// `voluntary_ctxt_switches` of each one's `status`).
pub fn voluntary_switches(pid: u32, counts: impl Fn(&str) -> bool) -> u64 {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("status")).ok())
        .filter(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Name:"))
                .is_some_and(|name| counts(name.trim()))
        })
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|n| n.trim().parse::<u64>().ok())
        })
        .sum()
}

/// This process's resident memory, bytes (`VmRSS` of `/proc/self/status`;
/// 0 where it cannot be read).
pub fn own_rss() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The parent of process `pid`, from `/proc/PID/stat`.
pub fn parent(pid: u32) -> Option<u32> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ...; comm may contain spaces and ')'.
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// How long ago process `pid` was started (forked), from its
/// `/proc/PID/stat` start time against the boot clock; `None` if it is gone.
pub fn age(pid: u32) -> Option<std::time::Duration> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After "pid (comm)": state is field 3, starttime field 22.
    let ticks: u64 = s[s.rfind(')')? + 1..]
        .split_ascii_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    let now_ns = crate::sys::boottime_ns();
    let started_ns = ticks.saturating_mul(1_000_000_000) / user_hz();
    Some(std::time::Duration::from_nanos(
        now_ns.saturating_sub(started_ns),
    ))
}

/// Whether process `pid` is `ancestor` or one of its descendants.
pub fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut p = pid;
    // A process tree is shallow; the bound guards against a /proc race.
    for _ in 0..256 {
        if p == ancestor {
            return true;
        }
        match parent(p) {
            Some(q) if q != 0 && q != p => p = q,
            _ => return false,
        }
    }
    false
}

/// Whether process `pid` still exists.
pub fn process_exists(pid: u32) -> bool {
    fs::metadata(format!("/proc/{pid}")).is_ok()
}

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// The supplementary groups of process `pid` (`Groups:` of its status);
/// empty if it cannot be read.
pub fn process_groups(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// `uname -r` and the host name.
pub fn uname() -> (String, String) {
    let read = |p: &str| {
        fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    (
        read("/proc/sys/kernel/osrelease"),
        read("/proc/sys/kernel/hostname"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_age_is_that_of_its_start() {
        let t = std::time::Instant::now();
        let child = std::process::Command::new("sleep")
            .arg("1")
            .spawn()
            .expect("sleep runs");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let young = age(child.id()).expect("the child exists");
        assert!(
            young <= t.elapsed() + std::time::Duration::from_millis(20)
                && young >= std::time::Duration::from_millis(250),
            "{young:?}"
        );
        let ours = age(std::process::id()).expect("this process exists");
        assert!(ours >= young, "{ours:?} {young:?}");
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(age(u32::MAX), None);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn proc_stat_lines() {
        let s = "cpu  1 2 3 4 5 6\ncpu0 10 0 0 400 7 0 0\ncpu1 1 1 1 500 0 1\nintr 5\n";
        let v = parse_proc_stat(s);
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].cpu, v[0].idle, v[0].iowait), (0, 400, 7));
        assert_eq!((v[1].cpu, v[1].idle, v[1].iowait), (1, 500, 0));
    }

    #[test]
    fn this_process_is_in_proc() {
        let me = std::process::id();
        assert!(process_exists(me));
        assert!(threads().iter().any(|t| t.tid == me && t.pid == me));
        assert!(!online_cpus().unwrap().is_empty());
    }

    #[test]
    fn a_process_descends_from_itself_and_its_ancestors_only() {
        let me = std::process::id();
        assert!(super::descends_from(me, me));
        let parent = super::parent(me).unwrap();
        assert!(super::descends_from(me, parent));
        assert!(!super::descends_from(parent, me));
        assert!(!super::descends_from(me, u32::MAX));
    }
}

#[cfg(test)]
mod maps_tests {
    use super::*;

    #[test]
    fn executable_mappings_with_a_path_are_kept() {
        let text = "\
55d0c0a00000-55d0c0a02000 r--p 00000000 fe:01 1234 /usr/bin/cat
55d0c0a02000-55d0c0a07000 r-xp 00002000 fe:01 1234 /usr/bin/cat
7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 
7f1e2c400000-7f1e2c580000 r-xp 00026000 fe:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd4b5f0000-7ffd4b5f2000 r-xp 00000000 00:00 0                          [vdso]
7f00000000-7f00001000 r-xp 00000000 00:00 0 /tmp/a b (deleted)
";
        let m = parse_exec_maps(text);
        assert_eq!(m.len(), 4, "{m:?}");
        assert_eq!(m[0].start, 0x55d0c0a02000);
        assert_eq!(m[0].pgoff, 0x2000);
        assert_eq!(m[0].path, "/usr/bin/cat");
        assert_eq!(m[0].ino, 1234);
        assert_eq!(m[1].path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(m[2].path, "[vdso]");
        assert_eq!(m[3].path, "/tmp/a b", "a path with a space, deleted");
    }
}
