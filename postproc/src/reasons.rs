//! Why a thread waited, and what ended the wait, as types: the JVM's
//! reasons ([`JvmReason`], from the flight recorder or the JVM's own
//! native frames), the kernel's ([`KernelReason`], from the innermost
//! kernel frame outside the scheduler), a path's [`Reason`] (whichever of
//! them named it), and the [`Device`] an interrupt that ended a wait
//! belongs to — each with its words and the frame rules that recognise it.
//! Every layer reads reasons from here; none compares a reason's words.
//!
//! Adding a reason (`docs/ARCHITECTURE.md`, "Add a wait reason"): a
//! variant, its words, and its rule, in this file.
//!
//! Invariant: a reason reads as its words everywhere (text, JSON, folded
//! stacks, history), and [`Reason::parse`] reads the words back into the
//! same reason; two reasons that read the same are the same cause (the
//! JVM's `sleep` and the kernel's are one line of the report).

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::path::{FrameKind, PathFrame};

/// The JVM's reasons for a wait (`jdk.JavaMonitorEnter`, `jdk.ThreadPark`,
/// …), as the recording stores them.
pub use idleflow_format::WaitReason as JvmReason;

/// A kernel wait, named by the innermost kernel frame outside the
/// scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KernelReason {
    /// A futex: a lock, a condition variable, a JVM's park.
    FutexWait,
    /// `nanosleep`, an hrtimer sleep.
    Sleep,
    /// Reading an empty pipe.
    PipeRead,
    /// Writing a full pipe.
    PipeWrite,
    /// `epoll_wait`.
    EpollWait,
    /// `poll`, `select`.
    Poll,
    /// Waiting on a socket.
    SocketWait,
    /// Waiting for a block device (page, buffer, journal, `fsync`).
    DiskIo,
    /// The thread ended.
    ThreadExit,
    /// `wait4` for a child.
    ChildWait,
    /// A kernel worker with nothing to do.
    KernelThreadIdle,
    /// Waiting for a signal (`sigtimedwait`, `sigsuspend`, `pause`).
    SignalWait,
}

impl KernelReason {
    /// Every kernel reason, in the order the rules try them.
    pub const ALL: [KernelReason; 12] = [
        KernelReason::FutexWait,
        KernelReason::Sleep,
        KernelReason::PipeRead,
        KernelReason::PipeWrite,
        KernelReason::EpollWait,
        KernelReason::Poll,
        KernelReason::SocketWait,
        KernelReason::DiskIo,
        KernelReason::ThreadExit,
        KernelReason::ChildWait,
        KernelReason::KernelThreadIdle,
        KernelReason::SignalWait,
    ];

    /// The reason in words.
    pub fn words(self) -> &'static str {
        match self {
            KernelReason::FutexWait => "futex wait",
            KernelReason::Sleep => "sleep",
            KernelReason::PipeRead => "pipe read",
            KernelReason::PipeWrite => "pipe write",
            KernelReason::EpollWait => "epoll wait",
            KernelReason::Poll => "poll",
            KernelReason::SocketWait => "socket wait",
            KernelReason::DiskIo => "disk I/O",
            KernelReason::ThreadExit => "thread exit",
            KernelReason::ChildWait => "child wait",
            KernelReason::KernelThreadIdle => "kernel thread idle",
            KernelReason::SignalWait => "signal wait",
        }
    }

    /// Whether kernel function `wait` (a stack's wait: its innermost frame
    /// outside the scheduler) is a wait of this kind.
    fn matches(self, wait: &str) -> bool {
        let w = wait.trim_start_matches('_');
        match self {
            KernelReason::FutexWait => w.starts_with("futex"),
            KernelReason::Sleep => {
                w.contains("nanosleep") || w.starts_with("hrtimer") || w.contains("clock_nanosleep")
            }
            KernelReason::PipeRead => w.contains("pipe_read") || w.contains("pipe_wait"),
            KernelReason::PipeWrite => w.contains("pipe_write"),
            KernelReason::EpollWait => w.starts_with("ep_poll") || w.starts_with("do_epoll"),
            KernelReason::Poll => w.contains("poll") || w.contains("select"),
            KernelReason::SocketWait => {
                w.starts_with("sk_wait")
                    || w.starts_with("tcp_")
                    || w.starts_with("unix_stream")
                    || w.starts_with("inet_")
                    || w.contains("skb_")
            }
            KernelReason::DiskIo => {
                w.starts_with("io_schedule")
                    || w.contains("folio_wait")
                    || w.starts_with("blk")
                    || w.starts_with("jbd2")
                    || w.contains("wait_on_page")
                    || w.contains("write_and_wait")
            }
            KernelReason::ThreadExit => w.starts_with("do_task_dead") || w.starts_with("do_exit"),
            KernelReason::ChildWait => w.contains("wait4") || w == "do_wait",
            KernelReason::KernelThreadIdle => {
                w.starts_with("worker_thread") || w.contains("kthread")
            }
            KernelReason::SignalWait => {
                w.contains("sigtimedwait") || w.contains("sigsuspend") || w.ends_with("sys_pause")
            }
        }
    }

    /// The reason of a stack whose wait is kernel function `wait`; `None`
    /// when no rule knows it.
    pub fn of_wait(wait: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.matches(wait))
    }
}

/// Functions of the scheduler (and of the tracing that took the stack)
/// that every blocked thread passes: a stack's wait is the first frame
/// that is not one of them.
pub fn is_scheduler_frame(name: &str) -> bool {
    let name = name.trim_start_matches('_');
    name.starts_with("schedule")
        || name.starts_with("traceiter")
        || name.starts_with("perf_")
        || name.starts_with("trace_")
        || name.starts_with("preempt_schedule")
        || name.starts_with("io_schedule")
        || name.starts_with("cond_resched")
        || name == "finish_task_switch"
}

/// The JVM's reason for a wait no flight-recorder event covers, from the
/// HotSpot functions of its native frames (innermost first), so that a
/// short wait reads as the recorded long ones do: a contended monitor's
/// entry, `Object.wait`, a park, `Thread.sleep`.
pub fn jvm_reason_of_native_frames(frames: &[PathFrame]) -> Option<JvmReason> {
    frames
        .iter()
        .filter(|f| f.frame.kind == FrameKind::Native)
        .find_map(|f| {
            let n = f.frame.name.as_str();
            if n.starts_with("ObjectMonitor::EnterI(") || n.starts_with("ObjectMonitor::enter(") {
                Some(JvmReason::MonitorEnter)
            } else if n.starts_with("ObjectMonitor::wait(") || n.starts_with("JVM_MonitorWait") {
                Some(JvmReason::MonitorWait)
            } else if n.starts_with("Parker::park(") || n.starts_with("Unsafe_Park") {
                Some(JvmReason::Park)
            } else if n.starts_with("JVM_Sleep") {
                Some(JvmReason::Sleep)
            } else {
                None
            }
        })
}

/// Why a path's threads waited: the JVM's reason where a wait covers the
/// dispatch (or the JVM's native frames say it), else the kernel's, else
/// the kernel function the wait was in, else no stack at all.
#[derive(Debug, Clone)]
pub enum Reason {
    /// The JVM's reason.
    Jvm(JvmReason),
    /// A kernel wait a rule knows.
    Kernel(KernelReason),
    /// A kernel wait no rule knows: its function's name.
    Function(String),
    /// No stack was taken at the switch-out.
    NoStack,
}

impl Reason {
    /// The reason in words (`monitor enter`, `futex wait`, the function).
    pub fn words(&self) -> &str {
        match self {
            Reason::Jvm(r) => r.words(),
            Reason::Kernel(r) => r.words(),
            Reason::Function(f) => f,
            Reason::NoStack => "no stack",
        }
    }

    /// The reason of a stack whose wait is kernel function `wait`.
    pub fn of_kernel_wait(wait: &str) -> Self {
        KernelReason::of_wait(wait)
            .map_or_else(|| Reason::Function(wait.to_string()), Reason::Kernel)
    }

    /// The reason that reads `words` (the inverse of [`Reason::words`]; a
    /// JVM's reason where a JVM's and the kernel's read the same).
    pub fn parse(words: &str) -> Self {
        if let Some(r) = JvmReason::ALL.into_iter().find(|r| r.words() == words) {
            Reason::Jvm(r)
        } else if let Some(r) = KernelReason::ALL.into_iter().find(|r| r.words() == words) {
            Reason::Kernel(r)
        } else if words == "no stack" {
            Reason::NoStack
        } else {
            Reason::Function(words.to_string())
        }
    }

    /// A JVM's monitor wait (`Object.wait`): its other thread notified it.
    pub fn is_monitor_wait(&self) -> bool {
        matches!(self, Reason::Jvm(JvmReason::MonitorWait))
    }

    /// A JVM's wait for a lock: a monitor's (entry or `Object.wait`) or a
    /// park's.
    pub fn is_jvm_lock_wait(&self) -> bool {
        matches!(
            self,
            Reason::Jvm(JvmReason::MonitorEnter | JvmReason::MonitorWait | JvmReason::Park)
        )
    }

    /// A sleep, the JVM's or the kernel's.
    pub fn is_sleep(&self) -> bool {
        matches!(
            self,
            Reason::Jvm(JvmReason::Sleep) | Reason::Kernel(KernelReason::Sleep)
        )
    }
}

impl From<JvmReason> for Reason {
    fn from(r: JvmReason) -> Self {
        Reason::Jvm(r)
    }
}

/// The reason that reads `words` ([`Reason::parse`]).
impl From<&str> for Reason {
    fn from(words: &str) -> Self {
        Reason::parse(words)
    }
}

impl From<KernelReason> for Reason {
    fn from(r: KernelReason) -> Self {
        Reason::Kernel(r)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.words())
    }
}

impl PartialEq for Reason {
    fn eq(&self, other: &Self) -> bool {
        self.words() == other.words()
    }
}

impl Eq for Reason {}

impl Hash for Reason {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.words().hash(state);
    }
}

impl PartialOrd for Reason {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Reason {
    /// By words, as the report orders causes of equal idle.
    fn cmp(&self, other: &Self) -> Ordering {
        self.words().cmp(other.words())
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.words())
    }
}

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let words = String::deserialize(d)?;
        Ok(Reason::parse(&words))
    }
}

/// What an interrupt that ended a wait belongs to: a device, never the
/// task the interrupt happened to hit. (Ordered as their words are.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Device {
    /// A block device's completion.
    Disk,
    /// An interrupt no rule names.
    Interrupt,
    /// The network's receive.
    Network,
    /// A timer's expiry.
    Timer,
}

impl Device {
    /// The device in words, as roots name it (`[root: timer]`).
    pub fn words(self) -> &'static str {
        match self {
            Device::Disk => "disk",
            Device::Network => "network",
            Device::Timer => "timer",
            Device::Interrupt => "interrupt",
        }
    }

    /// The device a wait that an interrupt ended was waiting for, from its
    /// kernel frames (innermost first), its reason and the thread's name
    /// (the block layer's kernel workers, `kworker/…-kblockd`).
    pub fn of_wait(frames: &[PathFrame], reason: &Reason, thread: &str) -> Self {
        let kernel = || {
            frames
                .iter()
                .take_while(|f| f.frame.kind == FrameKind::Kernel)
                .map(|f| f.frame.name.as_str())
        };
        let any = |keys: &[&str]| kernel().any(|n| keys.iter().any(|k| n.contains(k)));
        if any(&[
            "io_schedule",
            "blk_",
            "bio_",
            "folio_wait",
            "wait_on_page",
            "wait_on_buffer",
            "jbd2",
            "bit_wait_io",
            "nvme",
            "file_write_and_wait",
            "fsync",
            "dio_",
            "iomap",
            "blkdev",
        ]) || thread.contains("kblockd")
        {
            Device::Disk
        } else if any(&[
            "tcp_",
            "udp_",
            "unix_",
            "sk_wait",
            "sock_",
            "inet_",
            "skb_",
            "epoll",
            "ep_poll",
            "do_select",
            "do_sys_poll",
        ]) {
            Device::Network
        } else if any(&["nanosleep", "hrtimer", "schedule_timeout", "futex"])
            || reason.is_sleep()
            || reason.words().starts_with("Thread.sleep")
        {
            Device::Timer
        } else {
            Device::Interrupt
        }
    }

    /// The device an interrupt's kernel stack at a wake-up belongs to: the
    /// innermost frame that names one (a timer's expiry, a socket's or the
    /// network stack's receive, a block request's completion); `None` when
    /// none does.
    pub fn of_interrupt(frames: &[PathFrame]) -> Option<Self> {
        const DISK: &[&str] = &[
            "blk_",
            "bio_",
            "scsi",
            "nvme",
            "ata_",
            "virtblk",
            "end_page",
            "folio_end",
            "dio_",
            "iomap_",
            "end_buffer",
        ];
        const NETWORK: &[&str] = &[
            "sock_", "tcp_", "udp_", "net_rx", "napi", "netif", "skb_", "inet_", "ip_rcv", "ip6_",
            "unix_", "loopback",
        ];
        const TIMER: &[&str] = &[
            "hrtimer_wakeup",
            "process_timeout",
            "it_real_fn",
            "posix_timer",
            "timerfd_",
            "call_timer_fn",
            "hrtimer_run",
            "tick_",
        ];
        frames
            .iter()
            .take_while(|f| f.frame.kind == FrameKind::Kernel)
            .find_map(|f| {
                let n = f.frame.name.as_str();
                let has = |keys: &[&str]| keys.iter().any(|k| n.contains(k));
                if has(DISK) {
                    Some(Device::Disk)
                } else if has(NETWORK) {
                    Some(Device::Network)
                } else if has(TIMER) {
                    Some(Device::Timer)
                } else {
                    None
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_waits_read_as_words_and_back() {
        let r = |w: &str| Reason::of_kernel_wait(w);
        assert_eq!(r("futex_do_wait"), Reason::Kernel(KernelReason::FutexWait));
        assert_eq!(r("anon_pipe_read").words(), "pipe read");
        assert_eq!(r("do_nanosleep").words(), "sleep");
        assert_eq!(r("ep_poll").words(), "epoll wait");
        assert_eq!(r("do_sigtimedwait").words(), "signal wait");
        assert_eq!(r("__x64_sys_rt_sigsuspend").words(), "signal wait");
        assert_eq!(
            r("some_driver_wait"),
            Reason::Function("some_driver_wait".into())
        );
        for k in KernelReason::ALL {
            assert_eq!(Reason::parse(k.words()).words(), k.words());
        }
        for j in JvmReason::ALL {
            assert_eq!(Reason::parse(j.words()), Reason::Jvm(j));
        }
        assert_eq!(Reason::parse("no stack"), Reason::NoStack);
        assert_eq!(
            Reason::parse("xyz_wait"),
            Reason::Function("xyz_wait".into())
        );
        // A JVM's sleep and the kernel's read the same: one cause.
        assert_eq!(
            Reason::Jvm(JvmReason::Sleep),
            Reason::Kernel(KernelReason::Sleep)
        );
        assert_eq!(
            serde_json::to_string(&Reason::Kernel(KernelReason::DiskIo)).unwrap(),
            "\"disk I/O\""
        );
        let back: Reason = serde_json::from_str("\"monitor enter\"").unwrap();
        assert_eq!(back, Reason::Jvm(JvmReason::MonitorEnter));
    }

    #[test]
    fn scheduler_frames_are_passed_over() {
        assert!(is_scheduler_frame("__schedule"));
        assert!(is_scheduler_frame("finish_task_switch"));
        assert!(!is_scheduler_frame("futex_do_wait"));
    }
}
