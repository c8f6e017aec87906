//! Idle-causing kernel waits: the kernel's stack of each thread whose
//! leaving made a CPU idle, as the recorder took it at the switch-out
//! ([`idleflow_format::stacks`]), summed by stack with the idle time that
//! followed. The user stack taken at the same switch-out (unwound when the
//! recording ended, [`idleflow_format::ustacks`]) is kept beside it, for
//! the call paths ([`crate::sections::call_paths`]).
//!
//! A `SWITCH_STACK` (and a `SWITCH_USER_STACK`) record follows its
//! dispatch; the stacks are credited when
//! that dispatch's idle interval closes, as the idle causes are (so the
//! two always agree). What a report shows of a stack is its frames' names
//! and its *wait*: the innermost frame outside the scheduler's own
//! functions (`pipe_read`, `do_nanosleep`, `futex_wait_queue`, `ep_poll`).
//!
//! Where the recorder sampled the stacks at the switch-outs to idle
//! (`RunInfo::idle_stack_budget` > 0), a switch-out without its own has
//! its thread's previous stacks carried to it by the pass
//! ([`crate::pass::previous_stacks`]): taken like its own, not counted as
//! records read, and the idle after each dispatch to idle is counted by
//! where its stacks came from ([`StackSources`]).
//!
//! Invariant: memory grows with distinct stacks and (stack, thread) pairs,
//! never with the number of dispatches.

use crate::pass::handler::{Context, Credit, DispatchEvent, Handler, StackKind};
use idleflow_format::Record;
use idleflow_format::{CodeKind, KernelStack, KernelSymbols, SwitchStack, UserStack, UserSymbols};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::path;
use crate::reasons::is_scheduler_frame;

/// Idle caused through one stack by one thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caused {
    /// Dispatches to idle.
    pub dispatches: u64,
    /// Idle time that followed, ns.
    pub idle_ns: u64,
}

/// Dispatches to idle and their idle by where their stacks came from
/// (recordings whose stacks at the switch-outs to idle were sampled).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackSources {
    /// Taken at their own switch-out.
    pub own: Caused,
    /// Carried from their thread's previous switch-out to idle with stacks.
    pub carried: Caused,
    /// None: their thread had no earlier stacks.
    pub none: Caused,
}

impl StackSources {
    fn add(&mut self, other: &StackSources) {
        for (a, b) in [
            (&mut self.own, &other.own),
            (&mut self.carried, &other.carried),
            (&mut self.none, &other.none),
        ] {
            a.dispatches += b.dispatches;
            a.idle_ns = a.idle_ns.saturating_add(b.idle_ns);
        }
    }
}

/// Waits through one stack by one thread (recordings with stacks at every
/// wait, `record --stacks waits`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Blocked {
    /// Blocking switch-outs.
    pub waits: u64,
    /// Time until the thread ran again, ns.
    pub blocked_ns: u64,
}

/// The stacks taken at the last dispatch of a CPU.
#[derive(Debug, Clone, Copy)]
struct Pending {
    time: u64,
    tid: u32,
    /// Kernel stack id (0: none).
    kernel: u64,
    /// User stack id (0: none).
    user: u64,
    /// How many waits it stands for (a sampled sleep: the sampling period).
    weight: u64,
}

/// One user frame with where it came from ([`KernelWaits::user_frames_full`]).
#[derive(Debug, Clone, PartialEq)]
pub struct UserPathFrame<'a> {
    /// What ran there.
    pub kind: CodeKind,
    /// Its name.
    pub name: String,
    /// Its source line, 0 if unknown.
    pub line: u32,
    /// Its source file, empty if unknown.
    pub file: String,
    /// Its module's path (a JIT's perf map: `/tmp/perf-PID.map`), empty
    /// outside any module.
    pub module: &'a str,
    /// Inlined into the frame after it (a DWARF inline record, or a JIT's
    /// inlining as the JVM agent's perf map names it).
    pub inlined: bool,
    /// A Java frame the recorder walked from its JVM's structures (no
    /// module, no address).
    pub walked: bool,
}

/// The key of [`KernelWaits::caused`]: (kernel stack id, user stack id,
/// tid), a stack id 0 where there is none.
pub type StacksKey = (u64, u64, u32);

/// What one pass collects of the stacks taken at switch-outs.
#[derive(Debug, Default)]
pub struct KernelWaits {
    stacks: FxHashMap<u64, Box<[u64]>>,
    symbols: FxHashMap<u64, String>,
    /// Why some addresses have no names (from the recording).
    pub notes: Vec<String>,
    /// Per CPU slot, the stacks of its last dispatch.
    pending: Vec<Option<Pending>>,
    /// What followed each thread leaving with its stacks.
    pub caused: FxHashMap<StacksKey, Caused>,
    /// `SWITCH_STACK` records read.
    pub switch_stacks: u64,
    /// `SWITCH_USER_STACK` records read.
    pub switch_user_stacks: u64,
    /// `STACK_COPY` records read: a recording whose user stacks were never
    /// resolved.
    pub unresolved_copies: u64,
    user_stacks: FxHashMap<u64, UserStack>,
    /// The user stacks' modules, frames and counts.
    pub user_symbols: Option<Box<UserSymbols>>,
    /// Whether blocked time is summed ([`KernelWaits::track_blocked`]).
    tracking: bool,
    /// One interruptible sleep in this many had its stacks taken
    /// (`RunInfo::wait_sample_period`, at least 1).
    pub wait_sample_period: u64,
    /// Per CPU slot, the last dispatch: (time, leaving tid, the waits it
    /// stands for if it blocked, else 0).
    last: Vec<Option<(u64, u32, u64)>>,
    /// Threads blocked now, with the stacks taken when they left.
    open_waits: FxHashMap<u32, Pending>,
    /// Where threads blocked, and for how long.
    pub blocked: FxHashMap<StacksKey, Blocked>,
    /// With sampled stacks ([`KernelWaits::count_stack_sources`]): per
    /// thread, its dispatches to idle by where their stacks came from.
    stack_sources: Option<FxHashMap<u32, StackSources>>,
}

impl KernelWaits {
    /// Whether the recording has stacks of either kind at all.
    pub fn is_empty(&self) -> bool {
        self.switch_stacks == 0 && self.switch_user_stacks == 0
    }

    /// An interned user stack's definition.
    pub fn user_stack(&mut self, s: UserStack) {
        self.user_stacks.insert(s.id, s);
    }

    /// The user stack of the dispatch just read on CPU slot `ci`.
    pub fn switch_user_stack(&mut self, ci: usize, s: &SwitchStack) {
        self.switch_user_stacks += 1;
        self.take_stack(ci, s, StackKind::User);
    }

    /// A stack of the dispatch just read on CPU slot `ci`, its own or
    /// carried to it.
    fn take_stack(&mut self, ci: usize, s: &SwitchStack, kind: StackKind) {
        match kind {
            StackKind::Kernel => {
                self.pending_at(ci, s).kernel = s.stack;
                self.open_wait(ci, s, |w| w.kernel = s.stack);
            }
            StackKind::User => {
                self.pending_at(ci, s).user = s.stack;
                self.open_wait(ci, s, |w| w.user = s.stack);
            }
        }
    }

    /// Counts each dispatch to idle and its idle by where its stacks came
    /// from ([`KernelWaits::stack_sources`]): a recording whose stacks at
    /// the switch-outs to idle were sampled.
    pub fn count_stack_sources(&mut self) {
        self.stack_sources = Some(FxHashMap::default());
    }

    /// With sampled stacks, the dispatches to idle and their idle by where
    /// their stacks came from, all threads but those of `skip`.
    pub fn stack_sources(&self, skip: &FxHashSet<u32>) -> Option<StackSources> {
        let by_thread = self.stack_sources.as_ref()?;
        let mut sum = StackSources::default();
        for (tid, s) in by_thread {
            if !skip.contains(tid) {
                sum.add(s);
            }
        }
        Some(sum)
    }

    /// Sums blocked time by stacks from now on: a recording with stacks at
    /// every blocking switch-out (`RunInfo::stacks` `waits`), or at one
    /// interruptible sleep in `sample_period` (each then counted that many
    /// times).
    pub fn track_blocked(&mut self, sample_period: u32) {
        self.tracking = true;
        self.wait_sample_period = u64::from(sample_period.max(1));
    }

    /// Whether blocked time is summed.
    pub fn tracks_blocked(&self) -> bool {
        self.tracking
    }

    /// Every dispatch of the window on CPU slot `ci`, in time order: ends
    /// the wait of the thread it runs, and notes whether the leaving thread
    /// blocked (a sleep, not a preemption or an exit).
    pub fn dispatched(&mut self, ci: usize, d: &idleflow_format::Dispatch) {
        if !self.tracking {
            return;
        }
        if let Some(w) = self.open_waits.remove(&d.next_tid) {
            let b = self
                .blocked
                .entry((w.kernel, w.user, d.next_tid))
                .or_default();
            b.waits += w.weight;
            b.blocked_ns = b
                .blocked_ns
                .saturating_add(d.time.saturating_sub(w.time).saturating_mul(w.weight));
        }
        if self.last.len() <= ci {
            self.last.resize(ci + 1, None);
        }
        use idleflow_format::PrevState as S;
        let blocked = d.prev_tid != 0
            && matches!(
                d.prev_state,
                S::Sleeping | S::DiskSleep | S::Parked | S::IdleWait | S::Blocked
            );
        // Only the interruptible sleeps that did not leave the CPU idle are
        // sampled (the recorder's `WAIT_SAMPLE_FILTER`).
        let weight = match (blocked, d.prev_state) {
            (false, _) => 0,
            (true, S::Sleeping) if d.next_tid != 0 => self.wait_sample_period.max(1),
            (true, _) => 1,
        };
        self.last[ci] = Some((d.time, d.prev_tid, weight));
    }

    /// A thread exited: a wait it never left is not counted.
    pub fn exited(&mut self, tid: u32) {
        self.open_waits.remove(&tid);
    }

    /// Adds a stack of the dispatch just read on CPU slot `ci` to its
    /// thread's open wait, if that dispatch was a blocking switch-out.
    fn open_wait(&mut self, ci: usize, s: &SwitchStack, set: impl FnOnce(&mut Pending)) {
        let weight = match self.last.get(ci).copied().flatten() {
            Some((time, tid, weight)) if time == s.time && tid == s.tid && weight > 0 => weight,
            _ => return,
        };
        if !self.tracking {
            return;
        }
        let fresh = Pending {
            time: s.time,
            tid: s.tid,
            kernel: 0,
            user: 0,
            weight,
        };
        let w = self.open_waits.entry(s.tid).or_insert(fresh);
        if w.time != s.time {
            *w = fresh;
        }
        set(w);
    }

    /// The pending stacks of CPU slot `ci` for the switch-out `s` names.
    fn pending_at(&mut self, ci: usize, s: &SwitchStack) -> &mut Pending {
        if self.pending.len() <= ci {
            self.pending.resize(ci + 1, None);
        }
        let p = &mut self.pending[ci];
        if !p.is_some_and(|p| p.time == s.time && p.tid == s.tid) {
            *p = Some(Pending {
                time: s.time,
                tid: s.tid,
                kernel: 0,
                user: 0,
                weight: 1,
            });
        }
        p.as_mut().expect("just set")
    }

    /// An interned user stack by id.
    pub fn user(&self, id: u64) -> Option<&UserStack> {
        self.user_stacks.get(&id)
    }

    /// The frames of user stack `id`, innermost first, inlined functions
    /// as frames of their own: (what ran, name). A frame without a name is
    /// `module+0xoffset` (a stripped binary), `[unknown]` outside any
    /// module.
    pub fn user_frames(&self, id: u64) -> Vec<(CodeKind, String)> {
        self.user_frames_full(id)
            .into_iter()
            .map(|f| (f.kind, f.name))
            .collect()
    }

    /// [`KernelWaits::user_frames`] with each frame's source line (where
    /// DWARF gave one; inlined frames have none) and module path (empty
    /// outside any module).
    pub fn user_frames_full(&self, id: u64) -> Vec<UserPathFrame<'_>> {
        let (Some(st), Some(sy)) = (self.user_stacks.get(&id), self.user_symbols.as_ref()) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(st.frames.len());
        // The JNI function of the frame before, whose caller must be its
        // method's native wrapper.
        let mut jni: Option<&str> = None;
        for &f in &st.frames {
            let Some(fr) = usize::try_from(f)
                .ok()
                .and_then(|f| f.checked_sub(1))
                .and_then(|i| sy.frames.get(i))
            else {
                jni = None;
                out.push(UserPathFrame {
                    kind: CodeKind::Unknown,
                    name: "[unknown]".to_string(),
                    line: 0,
                    file: String::new(),
                    module: "",
                    inlined: false,
                    walked: false,
                });
                continue;
            };
            // A JIT frame above a JNI function (or an `Unsafe_*` native)
            // that is not that function's method: the perf map named code
            // that was not there when the stack was copied, so this frame
            // and those above it are unknown. The stack stops at the JNI
            // function.
            if let Some(symbol) = jni.take() {
                let innermost = fr.inlined.last().unwrap_or(&fr.name);
                if fr.kind == CodeKind::Jit
                    && !path::jni_caller_matches(symbol, path::java_method(innermost))
                {
                    break;
                }
            }
            if fr.kind == CodeKind::Native
                && (fr.name.starts_with("Java_") || fr.name.starts_with("Unsafe_"))
            {
                jni = Some(&fr.name);
            }
            let walked = fr.module == 0
                && fr.addr == 0
                && matches!(fr.kind, CodeKind::Jit | CodeKind::Interpreted);
            let module = usize::try_from(fr.module)
                .ok()
                .and_then(|m| m.checked_sub(1))
                .and_then(|i| sy.modules.get(i))
                .map_or("", |m| m.path.as_str());
            // The frame's line is its innermost function's: the first
            // inlined one out.
            for (i, inl) in fr.inlined.iter().rev().enumerate() {
                out.push(UserPathFrame {
                    kind: fr.kind,
                    name: if fr.kind == CodeKind::Jit {
                        path::java_method(inl).to_string()
                    } else {
                        inl.clone()
                    },
                    line: if i == 0 { fr.line } else { 0 },
                    file: if i == 0 {
                        fr.file.clone()
                    } else {
                        String::new()
                    },
                    module,
                    inlined: true,
                    walked,
                });
            }
            let name = if fr.kind == CodeKind::Jit && !fr.name.is_empty() {
                path::java_method(&fr.name).to_string()
            } else if !fr.name.is_empty() {
                fr.name.clone()
            } else if fr.kind == CodeKind::Unknown || fr.module == 0 {
                "[unknown]".to_string()
            } else {
                let short = if module.is_empty() {
                    "?"
                } else {
                    module.rsplit('/').next().unwrap_or(module)
                };
                format!("{short}+{:#x}", fr.addr)
            };
            out.push(UserPathFrame {
                kind: fr.kind,
                name,
                line: if fr.inlined.is_empty() { fr.line } else { 0 },
                file: if fr.inlined.is_empty() {
                    fr.file.clone()
                } else {
                    String::new()
                },
                module,
                inlined: false,
                walked,
            });
        }
        out
    }

    /// The kernel and user stack ids (0: none) taken at `tid`'s switch-out
    /// from CPU slot `ci` at `time`, if that was the last dispatch with
    /// stacks there.
    pub fn stacks_at(&self, ci: usize, tid: u32, time: u64) -> Option<(u64, u64)> {
        let p = self.pending.get(ci).copied().flatten()?;
        (p.time == time && p.tid == tid).then_some((p.kernel, p.user))
    }

    /// An interned stack's definition.
    pub fn stack(&mut self, s: KernelStack) {
        self.stacks.insert(s.id, s.ips.into_boxed_slice());
    }

    /// The stack of the dispatch just read on CPU slot `ci`.
    pub fn switch_stack(&mut self, ci: usize, s: &SwitchStack) {
        self.switch_stacks += 1;
        self.take_stack(ci, s, StackKind::Kernel);
    }

    /// The names of the stacks' addresses.
    pub fn symbols(&mut self, k: KernelSymbols) {
        self.notes.extend(k.notes);
        self.symbols.extend(
            k.symbols
                .into_iter()
                .filter(|s| !s.name.is_empty())
                .map(|s| (s.addr, s.name)),
        );
    }

    /// `tid` leaving CPU slot `ci` at `time` made it idle for `idle_ns`:
    /// credited to the stack taken at that switch-out, if there is one.
    pub fn idle_cause(&mut self, ci: usize, tid: u32, time: u64, idle_ns: u64) {
        let Some(Some(p)) = self.pending.get(ci).copied() else {
            return;
        };
        if p.time == time && p.tid == tid {
            self.credit_idle((p.kernel, p.user), tid, idle_ns, 1);
        }
    }

    /// Credits `idle_ns` to `tid`'s switch-out with `stacks` (kernel, user
    /// ids; see [`KernelWaits::stacks_at`]), counting `dispatches` (0 for
    /// idle that continued it after one of idleflow's own threads ran).
    pub fn credit_idle(&mut self, stacks: (u64, u64), tid: u32, idle_ns: u64, dispatches: u64) {
        let c = self.caused.entry((stacks.0, stacks.1, tid)).or_default();
        c.dispatches += dispatches;
        c.idle_ns = c.idle_ns.saturating_add(idle_ns);
    }

    /// The names of stack `id`'s frames from its wait (the innermost frame
    /// outside the scheduler, [`is_scheduler_frame`]) outward.
    pub fn wait_frames(&self, id: u64) -> Vec<String> {
        let mut all = self.frames(id);
        let inner = all.iter().position(|f| !is_scheduler_frame(f)).unwrap_or(0);
        all.drain(..inner);
        all
    }

    /// The names of stack `id`'s frames, innermost first (`0x…` where the
    /// recording has no name).
    pub fn frames(&self, id: u64) -> Vec<String> {
        self.stacks
            .get(&id)
            .map(|ips| {
                ips.iter()
                    .map(|ip| {
                        self.symbols
                            .get(ip)
                            .cloned()
                            .unwrap_or_else(|| format!("{ip:#x}"))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Handler for KernelWaits {
    fn dispatch(&mut self, e: &DispatchEvent<'_>, _ctx: &Context<'_>) {
        self.dispatched(e.ci, e.dispatch);
    }

    fn switch_stack(&mut self, ci: usize, s: &SwitchStack, kind: StackKind, _ctx: &Context<'_>) {
        match kind {
            StackKind::Kernel => KernelWaits::switch_stack(self, ci, s),
            StackKind::User => self.switch_user_stack(ci, s),
        }
    }

    /// Taken as the switch-out's own, without counting a record read.
    fn carried_stack(&mut self, ci: usize, s: &SwitchStack, kind: StackKind, _ctx: &Context<'_>) {
        self.take_stack(ci, s, kind);
    }

    fn other(&mut self, rec: Record, _ctx: &Context<'_>) -> Option<Record> {
        match rec {
            Record::KernelStack(k) => self.stack(*k),
            Record::KernelSymbols(k) => self.symbols(*k),
            Record::UserStack(u) => self.user_stack(*u),
            Record::UserSymbols(u) => self.user_symbols = Some(u),
            Record::StackCopy(_) => self.unresolved_copies += 1,
            Record::Exit(e) => {
                self.exited(e.tid);
                return Some(Record::Exit(e));
            }
            other => return Some(other),
        }
        None
    }

    fn idle(&mut self, c: &Credit, _ctx: &Context<'_>) {
        if let Some(stacks) = c.charge.stacks {
            self.credit_idle(stacks, c.charge.tid, c.idle_ns, c.dispatches);
        }
        if let Some(by_thread) = &mut self.stack_sources {
            let s = by_thread.entry(c.charge.tid).or_default();
            let e = match (c.charge.stacks, c.charge.stacks_carried) {
                (None, _) => &mut s.none,
                (Some(_), true) => &mut s.carried,
                (Some(_), false) => &mut s.own,
            };
            e.dispatches += c.dispatches;
            e.idle_ns = e.idle_ns.saturating_add(c.idle_ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sections::kernel_waits::KernelWaitsSection;
    use idleflow_format::KernelSymbol;
    use rustc_hash::FxHashSet;

    /// With `--wait-sample 4`, a sampled interruptible sleep to another
    /// thread stands for 4 waits; a sleep that left the CPU idle, and an
    /// uninterruptible one, carry their stacks every time and count once.
    #[test]
    fn a_sampled_sleep_counts_its_period_and_the_others_once() {
        use idleflow_format::{Dispatch, NodeTag, PrevState};
        let mut kw = KernelWaits::default();
        kw.track_blocked(4);
        let d = |time, prev_tid, prev_state, next_tid| Dispatch {
            time,
            cpu: 0,
            prev_tid,
            prev_state,
            next_tid,
            prev_node: NodeTag::Untraced,
        };
        // Thread 7 leaves for `next` in `state` at `at` with its stack, and
        // runs again `after` ns on.
        let mut wait = |at: u64, state, next, after: u64| {
            kw.dispatched(0, &d(at, 7, state, next));
            kw.switch_stack(
                0,
                &SwitchStack {
                    time: at,
                    cpu: 0,
                    tid: 7,
                    stack: 1,
                },
            );
            let back = if next == 0 {
                PrevState::Unknown
            } else {
                PrevState::Preempted
            };
            kw.dispatched(0, &d(at + after, next, back, 7));
        };
        // A sleep to thread 8 (sampled: ×4), then one to idle (every
        // time: ×1), then a disk sleep (every time: ×1); a preemption is
        // no wait, stack or not.
        wait(1_000, PrevState::Sleeping, 8, 100);
        wait(2_000, PrevState::Sleeping, 0, 50);
        wait(3_000, PrevState::DiskSleep, 8, 10);
        wait(4_000, PrevState::Preempted, 8, 500);
        let b = kw.blocked[&(1, 0, 7)];
        assert_eq!(b.waits, 4 + 1 + 1);
        assert_eq!(b.blocked_ns, 4 * 100 + 50 + 10);
    }

    #[test]
    fn a_stack_is_credited_only_to_its_own_dispatch_and_named_by_its_wait() {
        let mut kw = KernelWaits::default();
        kw.stack(KernelStack {
            id: 1,
            ips: vec![10, 20, 30],
        });
        kw.symbols(KernelSymbols {
            source: "test".into(),
            symbols: [(10, "__schedule"), (20, "schedule"), (30, "pipe_read")]
                .into_iter()
                .map(|(addr, name)| KernelSymbol {
                    addr,
                    name: name.into(),
                    offset: 0,
                })
                .collect(),
            notes: Vec::new(),
        });
        kw.switch_stack(
            1,
            &SwitchStack {
                time: 100,
                cpu: 1,
                tid: 7,
                stack: 1,
            },
        );
        // Another thread, another time, another CPU: not this stack's.
        kw.idle_cause(1, 8, 100, 5);
        kw.idle_cause(1, 7, 99, 5);
        kw.idle_cause(0, 7, 100, 5);
        kw.idle_cause(1, 7, 100, 40);
        let s = KernelWaitsSection::new(&kw, &FxHashSet::default(), (1, 40), |t| format!("t{t}"))
            .unwrap();
        assert_eq!(s.paths.len(), 1);
        let p = &s.paths[0];
        assert_eq!(p.wait, "pipe_read");
        assert_eq!((p.idle_dispatches_to, p.idle_ns), (1, 40));
        assert_eq!(
            p.threads,
            vec![("t*".to_string(), 1)],
            "a pool by its pattern"
        );
        // idleflow's own threads are left out.
        let tool: FxHashSet<u32> = [7].into_iter().collect();
        let s = KernelWaitsSection::new(&kw, &tool, (0, 0), |t| format!("t{t}")).unwrap();
        assert!(s.paths.is_empty());
    }

    /// A JIT frame above a JNI function that is not its method's native
    /// wrapper (a perf map written after the code there was replaced, as
    /// in Tomcat's Poller: `Java_sun_nio_ch_EPoll_wait` returning into
    /// `StringCache.toString`) is not shown: the stack stops at the JNI
    /// function. The wrapper itself, and the frames above it, are kept.
    #[test]
    fn a_jit_frame_that_cannot_call_the_jni_function_below_ends_the_stack() {
        use idleflow_format::{UnwindEnd, UserFrame, UserModule, UserStackCounts};
        let frame = |id: u64, kind, module, name: &str| UserFrame {
            id,
            kind,
            module,
            addr: id * 0x10,
            name: name.into(),
            inlined: Vec::new(),
            file: String::new(),
            line: 0,
        };
        let module = |id: u64, path: &str| UserModule {
            id,
            path: path.into(),
            build_id: String::new(),
            note: String::new(),
        };
        let mut kw = KernelWaits {
            user_symbols: Some(Box::new(UserSymbols {
            modules: vec![module(1, "/lib/libnio.so"), module(2, "/tmp/perf-1.map")],
            frames: vec![
                frame(1, CodeKind::Native, 1, "epoll_wait"),
                frame(2, CodeKind::Native, 1, "Java_sun_nio_ch_EPoll_wait"),
                frame(
                    3,
                    CodeKind::Jit,
                    2,
                    "java.lang.String org.apache.tomcat.util.buf.StringCache.toString(org.apache.tomcat.util.buf.ByteChunk)",
                ),
                frame(4, CodeKind::Jit, 2, "void java.text.MessageFormat.<init>(java.lang.String)"),
                frame(5, CodeKind::Jit, 2, "int sun.nio.ch.EPoll.wait(int, long, int, int)"),
                frame(
                    6,
                    CodeKind::Jit,
                    2,
                    "int sun.nio.ch.SelectorImpl.lockAndDoSelect(java.util.function.Consumer, long)",
                ),
            ],
            counts: UserStackCounts::default(),
            notes: Vec::new(),
        })),
            ..Default::default()
        };
        kw.user_stack(UserStack {
            id: 1,
            end: UnwindEnd::Stopped,
            frames: vec![1, 2, 3, 4],
        });
        kw.user_stack(UserStack {
            id: 2,
            end: UnwindEnd::Stopped,
            frames: vec![1, 2, 5, 6],
        });
        let names = |id| -> Vec<String> { kw.user_frames(id).into_iter().map(|f| f.1).collect() };
        assert_eq!(names(1), ["epoll_wait", "Java_sun_nio_ch_EPoll_wait"]);
        assert_eq!(
            names(2),
            [
                "epoll_wait",
                "Java_sun_nio_ch_EPoll_wait",
                "sun.nio.ch.EPoll.wait",
                "sun.nio.ch.SelectorImpl.lockAndDoSelect"
            ]
        );
    }
}
