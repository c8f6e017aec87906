//! idleflow's every-wait policy for one JVM ([`Rarity`]), the patent's:
//! look at every wait where waits are rare, at the thresholds' sample where
//! they are frequent.
//!
//! Invariant: the policy decides only on rates measured over at least
//! [`RATE_SPAN_NS`] of the program's own waits (never over idleflow's own
//! start or stop of a recording, nor the waits of HotSpot's own threads:
//! [`uncounted`]), and a JVM does not switch back on within
//! [`BACK_ON_AFTER_NS`] of switching off.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use idleflow_format::names::hotspot_internal;
use idleflow_tracer::procfs;

/// Whether the policy leaves the waits of a JVM's thread named `name` out
/// of the JVM's rate: HotSpot's own threads (compiler, GC, VM, service
/// threads: no wait of theirs is a wait event the flight recorder pays
/// for) and those that serve the attach mechanism and the flight recorder.
/// Measured on `java Waits rush 5`: in the JVM's first second they block
/// 1,400–3,300 times a second (idleflow's own flight recording starting,
/// the JIT), the program's threads 1,350–1,800.
pub(super) fn uncounted(name: &str) -> bool {
    hotspot_internal(name) || name == "Attach Listener" || name.starts_with("JFR ")
}

/// A JVM's threads that the policy leaves out ([`uncounted`]), known by
/// tid as the JVM makes and ends them. A new thread bears its maker's name
/// until it names itself, so each thread's name is read at two looks, then
/// kept.
#[derive(Debug, Default)]
pub(super) struct Uncounted {
    /// tid → (left out, looks at its name).
    threads: HashMap<u32, (bool, u8)>,
}

impl Uncounted {
    /// Looks at JVM `pid`'s threads again (one directory listing, and the
    /// names of the threads new since the look before); the threads left
    /// out now.
    pub(super) fn refresh(&mut self, pid: u32) -> Vec<u32> {
        let tids: HashSet<u32> = procfs::task_ids(pid).into_iter().collect();
        self.threads.retain(|t, _| tids.contains(t));
        for tid in tids {
            let (out, looks) = self.threads.entry(tid).or_insert((false, 0));
            if *looks < 2 {
                if let Some(name) = procfs::thread_name(pid, tid) {
                    *out = uncounted(&name);
                    *looks += 1;
                }
            }
        }
        let mut out: Vec<u32> = self
            .threads
            .iter()
            .filter(|(_, &(out, _))| out)
            .map(|(&tid, _)| tid)
            .collect();
        out.sort_unstable();
        out
    }
}

/// The shortest span a rate is measured over, ns.
const RATE_SPAN_NS: u64 = 200_000_000;

/// Every wait stops being recorded when the rate exceeds this many times
/// the policy's rate; it starts again once the rate fell below the policy's
/// rate, no sooner than [`BACK_ON_AFTER_NS`] after it stopped: a load that
/// swings around the rate does not make the JVM start and stop recordings
/// (a chunk rotation each) several times a second.
const OFF_ABOVE: f64 = 1.5;

/// See [`OFF_ABOVE`], ns.
const BACK_ON_AFTER_NS: u64 = 2_000_000_000;

/// idleflow's policy for one JVM, the patent's: look at every wait where
/// waits are rare, at the thresholds' sample where they are frequent. Fed
/// the JVM's blocking switch-outs as the recorder counts them, it says when
/// to start and stop recording every wait.
#[derive(Debug, Clone)]
pub(super) struct Rarity {
    /// Blocking switch-outs per second under which every wait is recorded
    /// (the machine's: `--all-waits-below` times the CPUs); 0: never.
    pub(super) below: f64,
    /// The last count that started a span, and when.
    pub(super) last: Option<(u64, u64)>,
    /// Blocking switch-outs per second over the last span.
    pub(super) rate: Option<f64>,
    /// Every wait is recorded since then (ns).
    pub(super) on_since: Option<u64>,
    /// When it last stopped (ns).
    pub(super) off_at: Option<u64>,
    /// Counts taken before this are not part of any span (ns; see
    /// [`Rarity::restart`]).
    counted_from: u64,
}

impl Rarity {
    pub(super) fn new(below: f64) -> Self {
        Rarity {
            below,
            last: None,
            rate: None,
            on_since: None,
            off_at: None,
            counted_from: 0,
        }
    }

    /// The JVM's threads blocked `n` times in `span` before its recording
    /// started (from `/proc`, its [`uncounted`] threads left out: the
    /// recorder's counts come later).
    pub(super) fn first(&mut self, n: u64, span: Duration) {
        self.rate = Some(n as f64 / span.as_secs_f64().max(1e-3));
    }

    /// The rate starts over from the recorder's first count after `at_ns`:
    /// idleflow just started or stopped a flight recording in the JVM, and
    /// a span over that (the recorder's own threads, the classes it loads
    /// and compiles) says nothing of how often the program waits; once
    /// stopped, every wait stays off for [`BACK_ON_AFTER_NS`].
    pub(super) fn restart(&mut self, at_ns: u64) {
        self.last = None;
        self.counted_from = at_ns;
    }

    /// The JVM's threads had blocked `count` times by `at_ns` (the
    /// recorder's count).
    pub(super) fn observe(&mut self, at_ns: u64, count: u64) {
        if at_ns < self.counted_from {
            return;
        }
        match self.last {
            Some((t, c)) if at_ns >= t + RATE_SPAN_NS => {
                self.rate = Some(count.saturating_sub(c) as f64 * 1e9 / (at_ns - t) as f64);
                self.last = Some((at_ns, count));
            }
            Some(_) => {}
            None => self.last = Some((at_ns, count)),
        }
    }

    /// Whether the policy has what it needs to decide.
    pub(super) fn knows(&self) -> bool {
        self.below <= 0.0 || self.rate.is_some()
    }

    /// `Some(true)`: start recording every wait now; `Some(false)`: stop.
    pub(super) fn decide(&self, now_ns: u64) -> Option<bool> {
        let rate = self.rate.filter(|_| self.below > 0.0)?;
        match self.on_since {
            Some(_) if rate > OFF_ABOVE * self.below => Some(false),
            None if rate < self.below
                && self
                    .off_at
                    .is_none_or(|t| now_ns >= t.saturating_add(BACK_ON_AFTER_NS)) =>
            {
                Some(true)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hotspots_own_threads_are_left_out_of_the_rate() {
        // Two threads of this process: one named as HotSpot's C2 compiler
        // threads are (the kernel keeps 15 characters), one as a pool's.
        let (stop, wait) = std::sync::mpsc::channel::<()>();
        let wait = std::sync::Arc::new(std::sync::Mutex::new(wait));
        let (named, started) = std::sync::mpsc::channel::<()>();
        let spawn = |name: &str| {
            let (wait, named) = (wait.clone(), named.clone());
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    // The new thread names itself before this runs.
                    let _ = named.send(());
                    let _ = wait.lock().map(|w| w.recv());
                })
                .unwrap()
        };
        let threads = [spawn("C2 CompilerThread0"), spawn("worker-1")];
        for _ in &threads {
            started.recv().unwrap();
        }
        let pid = std::process::id();
        let mut u = Uncounted::default();
        let (first, second) = (u.refresh(pid), u.refresh(pid));
        let names = |tids: &[u32]| -> Vec<String> {
            tids.iter()
                .filter_map(|&t| procfs::thread_name(pid, t))
                .collect()
        };
        assert_eq!(first, second);
        assert!(
            names(&first).iter().any(|n| n == "C2 CompilerThre"),
            "{:?} of {:?}",
            names(&first),
            procfs::tasks(pid)
        );
        assert!(
            names(&first).iter().all(|n| uncounted(n)),
            "{:?}",
            names(&first)
        );
        let compiler: Vec<u32> = first
            .iter()
            .copied()
            .filter(|&t| procfs::thread_name(pid, t).as_deref() == Some("C2 CompilerThre"))
            .collect();
        drop(stop);
        for t in threads {
            t.join().unwrap();
        }
        // Gone threads are forgotten (once the kernel took them out of
        // `/proc`, a moment after the join).
        for _ in 0..200 {
            if !procfs::task_ids(pid).iter().any(|t| compiler.contains(t)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let after = u.refresh(pid);
        assert!(
            !after.iter().any(|t| compiler.contains(t)),
            "{after:?} {compiler:?}"
        );
        assert!(uncounted("Attach Listener") && uncounted("JFR Periodic Ta"));
        assert!(!uncounted("worker-1") && !uncounted("main"));
    }

    /// 0.25 s spans at `rates` blocking switch-outs a second: what the
    /// policy said after each (`+` start, `-` stop, `.` nothing), applying it.
    fn run_policy(below: f64, rates: &[f64]) -> String {
        let mut r = Rarity::new(below);
        let (mut t, mut n) = (0u64, 0u64);
        r.observe(t, n);
        let mut said = String::new();
        for &rate in rates {
            t += 250_000_000;
            n += (rate / 4.0) as u64;
            r.observe(t, n);
            said.push(match r.decide(t) {
                Some(true) => {
                    r.on_since = Some(t);
                    '+'
                }
                Some(false) => {
                    r.on_since = None;
                    r.off_at = Some(t);
                    '-'
                }
                None => '.',
            });
        }
        said
    }

    #[test]
    fn every_wait_is_recorded_while_waits_are_rare() {
        // Rare from the start: on at once, and it stays on.
        assert_eq!(run_policy(3000.0, &[1800.0; 4]), "+...");
        // Frequent: never on.
        assert_eq!(run_policy(3000.0, &[47_000.0; 4]), "....");
        // Between the rate and 1.5x: stays as it is.
        assert_eq!(run_policy(3000.0, &[1000.0, 4000.0, 4400.0]), "+..");
        // A load arrives: off at once; it leaves: back on, but not within 2 s.
        let mut rates = vec![1000.0, 30_000.0];
        rates.extend([1000.0; 10]);
        assert_eq!(run_policy(3000.0, &rates), "+-.......+..");
        // 0: the policy is off.
        assert_eq!(run_policy(0.0, &[10.0; 3]), "...");
        assert!(Rarity::new(0.0).knows());
        assert!(!Rarity::new(3000.0).knows());
    }

    #[test]
    fn the_rate_over_a_jvms_start_does_not_stop_every_wait() {
        let mut r = Rarity::new(3000.0);
        // Counted from when the process turned out a JVM: 4,000 blocking
        // switch-outs while it loaded classes and started its recorder...
        r.observe(0, 0);
        // ...then /proc's count says its program waits rarely: on.
        r.first(400, Duration::from_millis(500));
        r.restart(550_000_000);
        assert_eq!(r.decide(600_000_000), Some(true));
        r.on_since = Some(600_000_000);
        r.restart(650_000_000);
        // A count taken while idleflow started the recordings (handed over
        // late) neither closes the start's span nor opens one.
        r.observe(640_000_000, 4_000);
        assert_eq!(r.decide(700_000_000), None);
        // The recorder's next count starts a span...
        r.observe(700_000_000, 4_100);
        assert_eq!(r.decide(700_000_000), None);
        // ...and a quarter second of the program's own rare waits keeps
        // every wait on.
        r.observe(950_000_000, 4_100 + 450);
        assert_eq!(r.rate, Some(1800.0));
        assert_eq!(r.decide(950_000_000), None);
    }
}
