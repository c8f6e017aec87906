//! The BPF object, opened, configured and loaded into the kernel (not yet
//! attached): the one place that drives the generated skeleton
//! ([`crate::skel`]) and captures what libbpf and the verifier say.
//!
//! Invariant: a [`Loaded`] holds programs the verifier accepted, with the
//! read-only settings (preempt count offset, how it is read, wake-up
//! threshold) frozen into them; the outer ring map and the `pending` map have one slot per
//! possible CPU, the rings all empty until [`crate::rings`] fills them.

use std::mem::MaybeUninit;
use std::sync::Mutex;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, OpenObject, PrintLevel};

use crate::error::BpfError;
use crate::percpu::{wake_context_here, WakeContextSource};
use crate::skel::{SchedSkel, SchedSkelBuilder};
use crate::stack_config::StackConfig;

/// The loaded programs and maps.
pub(crate) struct Loaded {
    pub skel: SchedSkel<'static>,
    wake_context: WakeContextSource,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("wake_context", &self.wake_context)
            .finish_non_exhaustive()
    }
}

impl Loaded {
    /// Opens and loads the programs with `cpu_slots` ring slots, waking the
    /// reader when a ring holds `wakeup_bytes` (0: the programs' default),
    /// taking the stacks `stacks` asks for.
    pub fn load(cpu_slots: u32, wakeup_bytes: u64, stacks: StackConfig) -> Result<Self, BpfError> {
        let (wake_context, offset) = wake_context_here();
        let settings = |untrusted_loads| Settings {
            cpu_slots,
            wakeup_bytes,
            preempt_count_from_rq: offset,
            untrusted_loads,
            stacks,
        };
        // Kernels before 6.17 refuse the cheaper read of the preempt
        // count; they get the helper call instead.
        let skel = load_with(settings(true)).or_else(|_| load_with(settings(false)))?;
        Ok(Loaded { skel, wake_context })
    }

    /// Attaches every program to its tracepoint; they run until the
    /// links are dropped. (Not the skeleton's own attach: it keeps the
    /// links' pointers, so links dropped by us would be destroyed twice
    /// and never attached again.)
    pub fn attach(&self) -> Result<Vec<Link>, BpfError> {
        let progs = &self.skel.progs;
        [&progs.on_switch, &progs.on_waking, &progs.on_wakeup_new]
            .into_iter()
            .map(|p| p.attach())
            .collect::<Result<_, _>>()
            .map_err(|e| BpfError::Attach {
                source: Box::new(e),
            })
    }

    /// Where the wake-ups' context comes from.
    pub fn wake_context(&self) -> &WakeContextSource {
        &self.wake_context
    }
}

/// The read-only settings and map sizes of one load.
#[derive(Debug, Clone, Copy)]
struct Settings {
    cpu_slots: u32,
    wakeup_bytes: u64,
    preempt_count_from_rq: i64,
    untrusted_loads: bool,
    stacks: StackConfig,
}

/// Opens the object and loads it with `settings`.
fn load_with(settings: Settings) -> Result<SchedSkel<'static>, BpfError> {
    // The skeleton borrows the object's storage for as long as it lives;
    // the storage is one pointer, given up for good so that the skeleton
    // can be kept in a struct (8 bytes per load, never reclaimed). The
    // object itself is closed when the skeleton drops.
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let (loaded, log) = capture_log(|| {
        let mut open = SchedSkelBuilder::default().open(storage)?;
        if let Some(rodata) = open.maps.rodata_data.as_deref_mut() {
            rodata.preempt_count_from_rq = settings.preempt_count_from_rq;
            rodata.untrusted_loads = settings.untrusted_loads;
            if settings.wakeup_bytes > 0 {
                rodata.wakeup_bytes = settings.wakeup_bytes;
            }
            let st = settings.stacks;
            rodata.idle_stacks = match (st.idle_kernel, st.idle_user_bytes) {
                (false, _) => 0,
                (true, 0) => 1,
                (true, _) => 2,
            };
            rodata.idle_user_bytes = st.idle_user_bytes & !7;
            rodata.idle_stack_budget = u64::from(st.idle_budget);
            rodata.waker_one_in = st.waker_one_in;
            rodata.waker_stack_budget = u64::from(st.waker_budget);
            rodata.waker_kernel = u32::from(st.waker_kernel);
            rodata.waker_user_bytes = st.waker_user_bytes & !7;
        }
        open.maps.rings.set_max_entries(settings.cpu_slots)?;
        open.maps.pending.set_max_entries(settings.cpu_slots)?;
        open.load()
    });
    loaded.map_err(|e| BpfError::Refused {
        reason: reason(&log, &e.to_string()),
        source: Box::new(e),
    })
}

/// What libbpf printed while [`capture_log`] ran.
static LOG: Mutex<String> = Mutex::new(String::new());
/// One capture at a time (libbpf's print callback is process-wide).
static CAPTURING: Mutex<()> = Mutex::new(());

fn keep(level: PrintLevel, msg: String) {
    if level != PrintLevel::Debug {
        if let Ok(mut log) = LOG.lock() {
            log.push_str(&msg);
        }
    }
}

/// Runs `f` with libbpf's messages captured instead of printed; returns
/// its result and the messages.
fn capture_log<T>(f: impl FnOnce() -> T) -> (T, String) {
    let _one = CAPTURING.lock().unwrap_or_else(|p| p.into_inner());
    let previous = libbpf_rs::set_print(Some((PrintLevel::Info, keep)));
    let out = f();
    libbpf_rs::set_print(previous);
    let log = LOG
        .lock()
        .map(|mut l| std::mem::take(&mut *l))
        .unwrap_or_default();
    (out, log)
}

/// The lines of a failed load's log worth showing a user: the end of the
/// verifier's log (its verdict) and libbpf's own error lines.
fn reason(log: &str, error: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.contains("-- END PROG LOAD LOG --"))
        .collect();
    let tail = &lines[lines.len().saturating_sub(8)..];
    if tail.is_empty() {
        error.to_string()
    } else {
        format!("{error}\n{}", tail.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_shows_the_end_of_the_log() {
        let log = (1..=20)
            .map(|i| format!("line {i}\n"))
            .chain(["-- END PROG LOAD LOG --\n".to_string()])
            .collect::<String>();
        let r = reason(&log, "Permission denied");
        assert!(r.starts_with("Permission denied\nline 13\n"), "{r}");
        assert!(r.ends_with("line 20"));
        assert_eq!(reason("", "Invalid argument"), "Invalid argument");
    }
}
