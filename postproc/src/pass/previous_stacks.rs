//! Stacks carried to the switch-outs to idle the recorder took none at.
//!
//! A recorder that samples the stacks at the switch-outs that leave a CPU
//! idle (`RunInfo::idle_stack_budget` > 0: at most about that many a
//! second on each CPU, each such switch-out with the same chance) writes
//! no `SWITCH_STACK` / `SWITCH_USER_STACK` record after most of their
//! dispatches when their rate is high. Such a switch-out stands for its
//! thread's previous stacks: the kernel and user stack ids of the most
//! recent switch-out to idle *of the same thread* that carried stacks of
//! its own (both from that one switch-out: a kernel stack without a user
//! stack carries no older user stack), and the system call's first
//! argument taken with them (a futex's address: what the blame chains
//! name the lock by). A thread without one stays without
//! stacks; a thread's stacks are forgotten when it exits (its tid may come
//! back as another thread's).
//!
//! A Java thread's switch-outs to idle say what it was blocked in (a
//! `SWITCH_JAVA_STATE` after the dispatch, from its JVM's monitor words as
//! the eBPF programs read them at every switch-out to idle, with stacks or
//! not): its previous stacks are carried only from a switch-out in the same
//! state — a sleep under a lock never stands for the monitor enter before
//! it, nor the other way round. A switch-out whose state is not said
//! (other threads, older recordings) takes the latest of those whose state
//! was not said either.
//!
//! The pass ([`crate::pass`]) tells [`PreviousStacks`] every dispatch to
//! idle and every stack record of the window, and asks it, before the
//! records that follow a switch-out's own stack records (the next dispatch
//! of any CPU, a wake-up, an exit, a loss) and at the window's end, for
//! the stacks to carry: it tells them to every handler
//! ([`crate::pass::handler::Handler::carried_stack`]) with the dispatch's
//! time, CPU and thread, where that switch-out's own records would have
//! been told, so every handler takes them as it would take its own.
//!
//! Invariants: memory is one entry per thread and state (its latest own
//! stacks at a switch-out to idle in that state: at most four) and one per
//! CPU slot (its last dispatch to idle), never one per dispatch; carried
//! stacks only ever come from the same thread, in the same state; with
//! `idle_stack_budget` 0 nothing is kept and nothing carried.

use idleflow_format::{Dispatch, JavaState, SwitchArg, SwitchJavaState, SwitchStack};
use rustc_hash::FxHashMap;

use crate::pass::handler::StackKind;

/// A thread's stacks at its latest switch-out to idle that had its own.
#[derive(Debug, Clone, Copy)]
struct Own {
    /// When it left.
    time: u64,
    /// Kernel stack id (0: none).
    kernel: u64,
    /// User stack id (0: none).
    user: u64,
    /// The system call's first argument, taken with the user stack.
    arg: Option<u64>,
}

/// A CPU slot's last dispatch to idle.
#[derive(Debug, Clone, Copy)]
struct ToIdle {
    time: u64,
    cpu: u32,
    tid: u32,
    /// What it was blocked in, if a Java thread's switch-out said.
    state: Option<JavaState>,
    /// A stack record of its own came.
    own: bool,
    /// Its thread's previous stacks were carried to it.
    carried: bool,
    /// When the switch-out they were taken at left (if carried).
    from: u64,
}

/// What to tell the handlers: a stack (CPU slot, the record, which stack),
/// or the system call's argument taken with it.
#[derive(Debug, Clone, Copy)]
pub enum Carried {
    /// A stack, as a `SWITCH_STACK` / `SWITCH_USER_STACK` record says it.
    Stack(usize, SwitchStack, StackKind),
    /// The argument, as a `SWITCH_ARG` record says it.
    Arg(SwitchArg),
}

/// The stacks carried to the switch-outs to idle without their own.
#[derive(Debug, Default)]
pub struct PreviousStacks {
    /// The recording's stacks at switch-outs to idle were sampled.
    sampled: bool,
    /// Per thread and state, its latest own stacks at a switch-out to idle.
    last: FxHashMap<(u32, Option<JavaState>), Own>,
    /// Per CPU slot, a state said before its dispatch was told (a folded
    /// wake-up's dispatch is read after the records of its time).
    early: Vec<Option<SwitchJavaState>>,
    /// Per CPU slot, its last dispatch to idle in the window.
    slots: Vec<Option<ToIdle>>,
    /// The CPU slots whose last dispatch to idle may still get its own
    /// stack records.
    waiting: Vec<usize>,
}

impl PreviousStacks {
    /// Carries stacks if `sampled` (the recording's `idle_stack_budget`
    /// is not 0); else does nothing at all.
    pub fn new(sampled: bool) -> Self {
        PreviousStacks {
            sampled,
            ..Default::default()
        }
    }

    /// Whether a dispatch to idle still waits to know its stacks.
    pub fn waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Dispatch `d` on CPU slot `ci` left its CPU idle.
    pub fn to_idle(&mut self, ci: usize, d: &Dispatch) {
        if !self.sampled {
            return;
        }
        if self.slots.len() <= ci {
            self.slots.resize(ci + 1, None);
        }
        let state = self
            .early
            .get_mut(ci)
            .and_then(Option::take)
            .filter(|j| j.time == d.time && j.tid == d.prev_tid)
            .map(|j| j.state);
        self.slots[ci] = Some(ToIdle {
            time: d.time,
            cpu: d.cpu,
            tid: d.prev_tid,
            state,
            own: false,
            carried: false,
            from: 0,
        });
        if !self.waiting.contains(&ci) {
            self.waiting.push(ci);
        }
    }

    /// What the Java thread of a switch-out to idle on CPU slot `ci` was
    /// blocked in: its stacks are kept as, or carried from, that state's.
    pub fn java_state(&mut self, ci: usize, j: &SwitchJavaState) {
        if !self.sampled {
            return;
        }
        match self.slots.get_mut(ci) {
            Some(Some(sw)) if sw.time == j.time && sw.tid == j.tid => {
                if !sw.own && !sw.carried {
                    sw.state = Some(j.state);
                }
            }
            _ => {
                if self.early.len() <= ci {
                    self.early.resize(ci + 1, None);
                }
                self.early[ci] = Some(*j);
            }
        }
    }

    /// A stack record of the window on CPU slot `ci`: if it is the last
    /// dispatch to idle's there, that switch-out has its own stacks, and
    /// they are its thread's latest.
    pub fn own_stack(&mut self, ci: usize, s: &SwitchStack, kind: StackKind) {
        let Some(Some(sw)) = self.slots.get_mut(ci) else {
            return;
        };
        if sw.time != s.time || sw.tid != s.tid || sw.carried {
            return;
        }
        sw.own = true;
        let state = sw.state;
        let e = self.latest(s.tid, state, s.time);
        match kind {
            StackKind::Kernel => e.kernel = s.stack,
            StackKind::User => e.user = s.stack,
        }
    }

    /// The system call's argument taken at a switch-out on CPU slot `ci`:
    /// kept with its stacks if it is the last dispatch to idle's there.
    pub fn own_arg(&mut self, ci: usize, a: &SwitchArg) {
        let Some(Some(sw)) = self.slots.get_mut(ci) else {
            return;
        };
        if sw.time != a.time || sw.tid != a.tid || sw.carried {
            return;
        }
        sw.own = true;
        let state = sw.state;
        self.latest(a.tid, state, a.time).arg = Some(a.arg);
    }

    /// `tid`'s entry in `state` for its switch-out at `time`, a fresh one
    /// if the entry is of an earlier switch-out.
    fn latest(&mut self, tid: u32, state: Option<JavaState>, time: u64) -> &mut Own {
        let fresh = Own {
            time,
            kernel: 0,
            user: 0,
            arg: None,
        };
        let e = self.last.entry((tid, state)).or_insert(fresh);
        if e.time != time {
            *e = fresh;
        }
        e
    }

    /// The dispatches to idle that waited for their stacks have had every
    /// record of their own: appends to `out` the stacks carried to those
    /// without any (kernel first, then user; none for a stack id 0).
    pub fn settle(&mut self, out: &mut Vec<Carried>) {
        for ci in self.waiting.drain(..) {
            let Some(Some(sw)) = self.slots.get_mut(ci) else {
                continue;
            };
            if sw.own {
                continue;
            }
            let Some(p) = self.last.get(&(sw.tid, sw.state)) else {
                continue;
            };
            sw.carried = true;
            sw.from = p.time;
            let at = |stack| SwitchStack {
                time: sw.time,
                cpu: sw.cpu,
                tid: sw.tid,
                stack,
            };
            if p.kernel != 0 {
                out.push(Carried::Stack(ci, at(p.kernel), StackKind::Kernel));
            }
            if let Some(arg) = p.arg {
                out.push(Carried::Arg(SwitchArg {
                    time: sw.time,
                    cpu: sw.cpu,
                    tid: sw.tid,
                    arg,
                }));
            }
            if p.user != 0 {
                out.push(Carried::Stack(ci, at(p.user), StackKind::User));
            }
        }
    }

    /// Whether `tid`'s switch-out to idle from CPU slot `ci` at `time` had
    /// its thread's previous stacks carried to it.
    pub fn carried_at(&self, ci: usize, tid: u32, time: u64) -> bool {
        self.carried_from(ci, tid, time).is_some()
    }

    /// When the switch-out left whose stacks were carried to `tid`'s
    /// switch-out to idle from CPU slot `ci` at `time` (`None`: none were).
    pub fn carried_from(&self, ci: usize, tid: u32, time: u64) -> Option<u64> {
        self.slots
            .get(ci)
            .copied()
            .flatten()
            .filter(|sw| sw.carried && sw.time == time && sw.tid == tid)
            .map(|sw| sw.from)
    }

    /// Thread `tid` exited: its stacks are carried to no other thread that
    /// gets its tid.
    pub fn exited(&mut self, tid: u32) {
        for state in [
            None,
            Some(JavaState::MonitorEnter),
            Some(JavaState::MonitorWait),
            Some(JavaState::Other),
        ] {
            self.last.remove(&(tid, state));
        }
    }

    /// Threads with stacks to carry (one entry each).
    #[cfg(test)]
    pub fn threads(&self) -> usize {
        self.last.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_format::{NodeTag, PrevState, IDLE_TID};

    fn to_idle(time: u64, cpu: u32, tid: u32) -> Dispatch {
        Dispatch {
            time,
            cpu,
            prev_tid: tid,
            prev_state: PrevState::Sleeping,
            next_tid: IDLE_TID,
            prev_node: NodeTag::Untraced,
        }
    }

    fn stack(time: u64, cpu: u32, tid: u32, stack: u64) -> SwitchStack {
        SwitchStack {
            time,
            cpu,
            tid,
            stack,
        }
    }

    #[test]
    fn the_latest_own_switch_out_is_carried_whole_and_only_to_its_thread() {
        let mut p = PreviousStacks::new(true);
        let mut out = Vec::new();
        // Thread 7: kernel 1 and user 2, then kernel 3 alone.
        p.to_idle(0, &to_idle(100, 0, 7));
        p.own_stack(0, &stack(100, 0, 7, 1), StackKind::Kernel);
        p.own_stack(0, &stack(100, 0, 7, 2), StackKind::User);
        p.settle(&mut out);
        p.to_idle(1, &to_idle(200, 1, 7));
        p.own_stack(1, &stack(200, 1, 7, 3), StackKind::Kernel);
        p.settle(&mut out);
        assert!(out.is_empty(), "own stacks carry nothing");
        // A stack record of another dispatch (another time) is not 7's.
        p.own_stack(1, &stack(250, 1, 7, 9), StackKind::User);
        // 7 again without stacks, and 8, which never had any.
        p.to_idle(0, &to_idle(300, 0, 7));
        p.to_idle(1, &to_idle(300, 1, 8));
        p.settle(&mut out);
        assert_eq!(out.len(), 1, "only kernel 3: the user stack 2 was older");
        let Carried::Stack(ci, s, kind) = out[0] else {
            panic!("a stack: {out:?}")
        };
        assert_eq!((ci, s.time, s.cpu, s.tid, s.stack), (0, 300, 0, 7, 3));
        assert_eq!(kind, StackKind::Kernel);
        assert!(p.carried_at(0, 7, 300));
        assert!(!p.carried_at(0, 7, 200) && !p.carried_at(1, 8, 300));
        assert!(!p.waiting());
        // 7 exits: its tid, reused, carries nothing.
        p.exited(7);
        out.clear();
        p.to_idle(0, &to_idle(400, 0, 7));
        p.settle(&mut out);
        assert!(out.is_empty());
        assert_eq!(p.threads(), 0);
    }

    #[test]
    fn the_system_calls_argument_goes_with_its_stacks() {
        let mut p = PreviousStacks::new(true);
        let mut out = Vec::new();
        p.to_idle(0, &to_idle(100, 0, 7));
        p.own_stack(0, &stack(100, 0, 7, 1), StackKind::Kernel);
        p.own_arg(
            0,
            &SwitchArg {
                time: 100,
                cpu: 0,
                tid: 7,
                arg: 0xfeed,
            },
        );
        p.own_stack(0, &stack(100, 0, 7, 2), StackKind::User);
        p.settle(&mut out);
        p.to_idle(1, &to_idle(200, 1, 7));
        p.settle(&mut out);
        let args: Vec<_> = out
            .iter()
            .filter_map(|c| match c {
                Carried::Arg(a) => Some((a.time, a.cpu, a.tid, a.arg)),
                Carried::Stack(..) => None,
            })
            .collect();
        assert_eq!(args, [(200, 1, 7, 0xfeed)]);
        assert_eq!(out.len(), 3, "kernel, argument, user: {out:?}");
    }

    fn state(time: u64, cpu: u32, tid: u32, state: JavaState) -> SwitchJavaState {
        SwitchJavaState {
            time,
            cpu,
            tid,
            state,
        }
    }

    /// A worker that sleeps holding a lock and then blocks entering it:
    /// each switch-out without stacks takes the stacks of its own state.
    #[test]
    fn a_java_threads_stacks_are_carried_only_from_the_same_state() {
        let mut p = PreviousStacks::new(true);
        let mut out = Vec::new();
        // Its sleep (kernel 1), then its monitor enter (kernel 2), each
        // with stacks; the monitor enter's state told before its dispatch
        // (a folded wake-up's dispatch is read late).
        p.to_idle(0, &to_idle(100, 0, 7));
        p.java_state(0, &state(100, 0, 7, JavaState::Other));
        p.own_stack(0, &stack(100, 0, 7, 1), StackKind::Kernel);
        p.settle(&mut out);
        p.java_state(0, &state(200, 0, 7, JavaState::MonitorEnter));
        p.to_idle(0, &to_idle(200, 0, 7));
        p.own_stack(0, &stack(200, 0, 7, 2), StackKind::Kernel);
        p.settle(&mut out);
        assert!(out.is_empty());
        // A sleep without stacks: the sleep's, not the later monitor enter's.
        p.to_idle(1, &to_idle(300, 1, 7));
        p.java_state(1, &state(300, 1, 7, JavaState::Other));
        p.settle(&mut out);
        let Some(Carried::Stack(_, s, _)) = out.first() else {
            panic!("a stack: {out:?}")
        };
        assert_eq!((s.time, s.stack), (300, 1));
        assert_eq!(p.carried_from(1, 7, 300), Some(100));
        // A monitor wait it never had stacks in: nothing carried.
        out.clear();
        p.to_idle(1, &to_idle(400, 1, 7));
        p.java_state(1, &state(400, 1, 7, JavaState::MonitorWait));
        p.settle(&mut out);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(p.threads(), 2);
        p.exited(7);
        assert_eq!(p.threads(), 0);
    }

    #[test]
    fn without_sampling_nothing_is_kept() {
        let mut p = PreviousStacks::new(false);
        p.to_idle(0, &to_idle(100, 0, 7));
        p.own_stack(0, &stack(100, 0, 7, 1), StackKind::Kernel);
        assert!(!p.waiting());
        p.to_idle(0, &to_idle(200, 0, 7));
        let mut out = Vec::new();
        p.settle(&mut out);
        assert!(out.is_empty());
        assert_eq!(p.threads(), 0);
    }
}
