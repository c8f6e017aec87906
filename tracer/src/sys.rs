//! The only place that talks to the kernel's perf ABI: `perf_event_open`,
//! its ioctls, and the attribute block. Everything here is a thin, safe
//! wrapper over one system call; callers never see a raw pointer.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use perf_event_open_sys as sys;
use sys::bindings::{
    perf_event_attr, PERF_FLAG_FD_CLOEXEC, PERF_FORMAT_LOST, PERF_SAMPLE_CALLCHAIN,
    PERF_SAMPLE_CPU, PERF_SAMPLE_RAW, PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER,
    PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_TYPE_TRACEPOINT,
};

/// A failed system call, with its name.
#[derive(Debug, thiserror::Error)]
#[error("{call} failed")]
pub struct SysError {
    /// The call, e.g. `perf_event_open(sched:sched_switch, cpu 1)`.
    pub call: String,
    /// What the kernel said.
    #[source]
    pub source: io::Error,
}

impl SysError {
    /// Whether the kernel refused for lack of privilege.
    pub fn is_permission(&self) -> bool {
        matches!(self.source.raw_os_error(), Some(libc::EACCES | libc::EPERM))
    }
}

/// The sample layout every idleflow event uses; records in one ring must
/// agree on it. Samples carry `pid, tid | time | cpu, res | nr, ips[nr] |
/// raw`; other records carry the trailer `pid, tid | time | cpu, res`
/// (`sample_id_all`). The call chain is empty (`nr` 0) unless the event
/// asks for the kernel's ([`EventSpec::kernel_callchain`]).
pub const SAMPLE_TYPE: u64 = (PERF_SAMPLE_TID
    | PERF_SAMPLE_TIME
    | PERF_SAMPLE_CPU
    | PERF_SAMPLE_CALLCHAIN
    | PERF_SAMPLE_RAW) as u64;

/// The deepest kernel call chain taken (the kernel's default is 127).
pub const MAX_KERNEL_FRAMES: u16 = 48;

/// The user registers a sample with a user stack carries, as bits of
/// x86-64's `perf_regs` numbering: DI (5), BP (6), SP (7), IP (8), written
/// in that order. BP, SP and IP are all an unwinder needs (CFI gives the
/// rest); DI is, for a thread inside a system call, its first argument as
/// the call was entered (a futex wait's or wake's address).
pub const USER_REGS_MASK: u64 = (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8);

/// The largest user stack copy the kernel takes (`sample_stack_user` must
/// be below 64 KiB and a multiple of 8).
pub const MAX_USER_STACK_BYTES: u32 = 65528;

/// What to open on one CPU.
#[derive(Debug, Clone, Copy)]
pub struct EventSpec {
    /// Tracepoint id, from tracefs; [`SIDE_BAND_ONLY`]: no tracepoint, perf's
    /// dummy software event, which samples nothing and only brings the
    /// records asked for below (tasks, mappings).
    pub tracepoint_id: u64,
    /// Also emit `PERF_RECORD_SWITCH_CPU_WIDE` records (`context_switch`).
    pub switch_records: bool,
    /// Also emit comm, fork and exit records.
    pub task_records: bool,
    /// Wake a `poll` when this many bytes are in the ring.
    pub wakeup_bytes: u32,
    /// Samples carry the kernel's call chain (never the user's: user
    /// stacks are not walked by frame pointers here).
    pub kernel_callchain: bool,
    /// Samples also carry the user registers ([`USER_REGS_MASK`]) and a
    /// copy of this many bytes from the top of the user stack (0: none; a
    /// multiple of 8, at most [`MAX_USER_STACK_BYTES`]). They follow the
    /// raw data, so a ring can mix events with and without them.
    pub user_stack_bytes: u32,
    /// Also emit `MMAP2` records of executable mappings (with the file's
    /// device and inode: asking the kernel for build ids instead made it
    /// flag other tools' mmap records as build-id ones, and perf 6.1's
    /// `perf record -g` then failed an assertion writing its file).
    pub mmap_records: bool,
    /// A sample at one event in this many (per CPU) that pass the filter;
    /// 0 and 1 are every one.
    pub sample_period: u64,
}

/// [`EventSpec::tracepoint_id`] of an event that samples nothing.
pub const SIDE_BAND_ONLY: u64 = u64::MAX;

/// An open perf event, closed on drop.
#[derive(Debug)]
pub struct PerfEvent {
    fd: OwnedFd,
    /// Whether the kernel keeps this event's lost-record count for `read`
    /// (`PERF_FORMAT_LOST`, Linux 6.0).
    counts_lost: bool,
}

impl PerfEvent {
    /// Opens `spec` on every task of `cpu` (system-wide, `pid = -1`),
    /// disabled, stamping with `CLOCK_MONOTONIC`, one sample per
    /// `sample_period` events.
    pub fn open_cpu_wide(spec: &EventSpec, cpu: u32, what: &str) -> Result<Self, SysError> {
        let (type_, config) = if spec.tracepoint_id == SIDE_BAND_ONLY {
            (
                sys::bindings::PERF_TYPE_SOFTWARE,
                u64::from(sys::bindings::PERF_COUNT_SW_DUMMY),
            )
        } else {
            (PERF_TYPE_TRACEPOINT, spec.tracepoint_id)
        };
        let mut attr = perf_event_attr {
            type_,
            size: std::mem::size_of::<perf_event_attr>() as u32,
            config,
            sample_type: SAMPLE_TYPE,
            clockid: libc::CLOCK_MONOTONIC,
            ..Default::default()
        };
        if spec.user_stack_bytes > 0 {
            attr.sample_type |= (PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER) as u64;
            attr.sample_regs_user = USER_REGS_MASK;
            attr.sample_stack_user = spec.user_stack_bytes.min(MAX_USER_STACK_BYTES) & !7;
        }
        if spec.mmap_records {
            attr.set_mmap(1);
            attr.set_mmap2(1);
        }
        attr.__bindgen_anon_1.sample_period = spec.sample_period.max(1);
        attr.__bindgen_anon_2.wakeup_watermark = spec.wakeup_bytes;
        attr.set_watermark(1);
        attr.set_disabled(1);
        attr.set_sample_id_all(1);
        attr.set_use_clockid(1);
        attr.set_context_switch(u64::from(spec.switch_records));
        attr.set_comm(u64::from(spec.task_records));
        attr.set_comm_exec(u64::from(spec.task_records));
        attr.set_task(u64::from(spec.task_records));
        attr.set_exclude_callchain_user(1);
        attr.set_exclude_callchain_kernel(u64::from(!spec.kernel_callchain));
        attr.sample_max_stack = MAX_KERNEL_FRAMES;
        // The lost-record count, where the kernel keeps it: the only way to
        // learn of records lost at the very end (the kernel reports a loss
        // in the ring only once a later record fits).
        attr.read_format = PERF_FORMAT_LOST as u64;
        let mut counts_lost = true;
        let mut fd = open(&mut attr, cpu);
        if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            attr.read_format = 0;
            counts_lost = false;
            fd = open(&mut attr, cpu);
        }
        if fd < 0 {
            return Err(SysError {
                call: format!("perf_event_open({what}, cpu {cpu})"),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(PerfEvent { fd, counts_lost })
    }

    /// Records of this event the kernel could not write to its ring (full)
    /// so far, or `None` where the kernel does not count them.
    pub fn lost_records(&self) -> Option<u64> {
        if !self.counts_lost {
            return None;
        }
        // `read_format` is PERF_FORMAT_LOST alone: { value, lost }.
        let mut v = [0u64; 2];
        // SAFETY: reads at most 16 bytes into `v`, which has 16.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), v.as_mut_ptr().cast(), 16) };
        (n == 16).then_some(v[1])
    }

    /// The file descriptor, for `mmap` and `poll`.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Sends this event's records to `target`'s ring (same CPU, same clock).
    pub fn set_output(&self, target: &PerfEvent) -> Result<(), SysError> {
        // SAFETY: both descriptors are open perf events owned by `self` and `target`.
        let rc = unsafe { sys::ioctls::SET_OUTPUT(self.fd.as_raw_fd(), target.fd.as_raw_fd()) };
        check(rc, "ioctl(PERF_EVENT_IOC_SET_OUTPUT)")
    }

    /// Keeps only the tracepoint samples that pass the ftrace `filter`
    /// (e.g. `prev_state & 254`); records of other kinds are not affected.
    pub fn set_filter(&self, filter: &str) -> Result<(), SysError> {
        let call = || format!("ioctl(PERF_EVENT_IOC_SET_FILTER, {filter:?})");
        let c = std::ffi::CString::new(filter).map_err(|e| SysError {
            call: call(),
            source: io::Error::new(io::ErrorKind::InvalidInput, e),
        })?;
        // SAFETY: the kernel copies the NUL-terminated string during the
        // call and never writes through the pointer; `c` outlives the call.
        let rc = unsafe { sys::ioctls::SET_FILTER(self.fd.as_raw_fd(), c.as_ptr() as *mut _) };
        check(rc, &call())
    }

    /// Starts counting.
    pub fn enable(&self) -> Result<(), SysError> {
        // SAFETY: ENABLE takes no pointer; the descriptor is open.
        let rc = unsafe { sys::ioctls::ENABLE(self.fd.as_raw_fd(), 0) };
        check(rc, "ioctl(PERF_EVENT_IOC_ENABLE)")
    }

    /// Stops counting; records already in the ring stay readable.
    pub fn disable(&self) -> Result<(), SysError> {
        // SAFETY: DISABLE takes no pointer; the descriptor is open.
        let rc = unsafe { sys::ioctls::DISABLE(self.fd.as_raw_fd(), 0) };
        check(rc, "ioctl(PERF_EVENT_IOC_DISABLE)")
    }
}

/// `perf_event_open(attr, pid -1, cpu, no group, CLOEXEC)`: a descriptor or
/// -1 (errno set).
fn open(attr: &mut perf_event_attr, cpu: u32) -> i32 {
    // SAFETY: `attr` is a fully initialized perf_event_attr whose `size` is
    // its own size; the kernel only reads it (and writes `size` back on
    // E2BIG) during the call.
    unsafe { sys::perf_event_open(attr, -1, cpu as i32, -1, PERF_FLAG_FD_CLOEXEC as _) }
}

fn check(rc: i32, call: &str) -> Result<(), SysError> {
    if rc < 0 {
        Err(SysError {
            call: call.to_string(),
            source: io::Error::last_os_error(),
        })
    } else {
        Ok(())
    }
}

/// Now on `CLOCK_MONOTONIC`, the clock every event is stamped with, in ns.
pub use idleflow_wire::clock::{monotonic_ns, thread_cpu_ns};

/// Now on `CLOCK_BOOTTIME` (the clock of `/proc/PID/stat`'s start times).
pub use idleflow_wire::clock::boottime_ns;

/// A process handle that becomes readable when the process exits
/// (`pidfd_open`), so the recorder wakes for it instead of checking.
pub fn pidfd_open(pid: u32) -> Result<OwnedFd, SysError> {
    // SAFETY: pidfd_open takes no pointers.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    if fd < 0 {
        return Err(SysError {
            call: format!("pidfd_open({pid})"),
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Who is at the other end of a connected Unix socket, as the kernel saw
/// them connect (`SO_PEERCRED`): pid, uid, gid.
pub fn peer_credentials(socket: BorrowedFd<'_>) -> Result<(u32, u32, u32), SysError> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes and `len` says how
    // large `cred` is; the kernel writes at most that much.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(SysError {
            call: "getsockopt(SO_PEERCRED)".into(),
            source: io::Error::last_os_error(),
        });
    }
    Ok((cred.pid as u32, cred.uid, cred.gid))
}

/// An `eventfd`: one thread says "look" ([`EventFd::notify`]), another
/// waits for it in `poll` with other descriptors ([`poll_fds`]).
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A non-blocking eventfd.
    pub fn new() -> Result<Self, SysError> {
        // SAFETY: eventfd takes no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(SysError {
                call: "eventfd".into(),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd { fd })
    }

    /// Makes the descriptor readable.
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64; a full counter (EAGAIN)
        // still leaves the descriptor readable, which is all that matters.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), std::ptr::addr_of!(one).cast(), 8) };
    }

    /// Makes it unreadable again (until the next notify).
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a valid u64; EAGAIN (nothing
        // to clear) is fine.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), std::ptr::addr_of_mut!(v).cast(), 8) };
    }

    /// The descriptor, for [`poll_fds`].
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }
}

/// Waits until one of `fds` is readable or `timeout_ms` passes (an
/// interrupting signal also ends the wait). Descriptors that were closed
/// meanwhile are reported by the kernel, never a fault.
pub fn poll_fds(fds: &[i32], timeout_ms: i32) -> Result<(), SysError> {
    PollSet::new(fds).wait(timeout_ms)
}

/// Descriptors to wait on again and again, without allocating at each wait
/// (the drain thread's rule: no memory from the kernel while it runs).
#[derive(Debug, Clone)]
pub struct PollSet {
    fds: Vec<libc::pollfd>,
}

impl PollSet {
    /// A set waiting for `fds` to become readable.
    pub fn new(fds: &[i32]) -> Self {
        PollSet {
            fds: fds
                .iter()
                .map(|&fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect(),
        }
    }

    /// As [`poll_fds`].
    pub fn wait(&mut self, timeout_ms: i32) -> Result<(), SysError> {
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures.
        let rc = unsafe {
            libc::poll(
                self.fds.as_mut_ptr(),
                self.fds.len() as libc::nfds_t,
                timeout_ms,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(SysError {
                    call: "poll".into(),
                    source: e,
                });
            }
        }
        Ok(())
    }
}

/// Puts the calling thread in the real-time class `SCHED_FIFO` at
/// `priority` (as `perf record -r` does for its whole process). Needs root
/// or CAP_SYS_NICE; the kernel's RT throttling still leaves other tasks
/// 5 % of every CPU.
pub fn set_fifo_priority(priority: i32) -> Result<(), SysError> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        return Err(SysError {
            call: format!("sched_setscheduler(SCHED_FIFO, {priority})"),
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Puts the calling thread back in the ordinary class (`SCHED_OTHER`).
pub fn set_normal_priority() -> Result<(), SysError> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) };
    if rc != 0 {
        return Err(SysError {
            call: "sched_setscheduler(SCHED_OTHER, 0)".into(),
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Blocks every signal in the calling thread, so that signals meant for the
/// process (Ctrl-C, SIGTERM) reach its main thread.
pub fn block_signals() {
    // SAFETY: `set` is initialised by sigfillset before use; pthread_sigmask
    // only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}
