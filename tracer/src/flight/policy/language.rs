//! The trigger language (`record --trigger SPEC`, the grammar in the
//! parent module's documentation): what a trigger means ([`Condition`]),
//! whom it watches ([`Interest`]) and which of its occurrences fire
//! ([`Rate`]).
//!
//! Invariant: [`Trigger::parse`] reads exactly that grammar and says why
//! for anything else, never panicking.

use std::time::Duration;

use globset::{Glob, GlobMatcher};

use super::pressure::Stall;

/// Who a trigger watches.
#[derive(Debug, Clone)]
pub enum Interest {
    /// The recorded command's or process's threads (all without one).
    Target,
    /// Threads whose name matches.
    Named(NamePattern),
}

/// The kernel keeps 15 bytes of a thread's name (`TASK_COMM_LEN` - 1).
const COMM_BYTES: usize = 15;

/// A glob on thread names, as the kernel names them: a name of the full
/// 15 bytes may have been cut, so it also matches when the pattern's
/// first 15 bytes do, followed by anything (`http-nio-8080-exec-*` takes
/// `http-nio-8080-e`, the kernel's name of `http-nio-8080-exec-1`).
#[derive(Debug, Clone)]
pub struct NamePattern {
    whole: GlobMatcher,
    /// The pattern's first 15 bytes and `*`, when it is longer.
    cut: Option<GlobMatcher>,
}

impl NamePattern {
    pub(crate) fn new(pattern: &str) -> Result<Self, globset::Error> {
        let whole = Glob::new(pattern)?.compile_matcher();
        let cut = if pattern.len() > COMM_BYTES {
            let mut end = COMM_BYTES;
            while !pattern.is_char_boundary(end) {
                end -= 1;
            }
            // A cut inside a bracket or after a backslash leaves no glob:
            // then only the whole pattern matches.
            Glob::new(&format!("{}*", &pattern[..end]))
                .ok()
                .map(|g| g.compile_matcher())
        } else {
            None
        };
        Ok(NamePattern { whole, cut })
    }

    pub(crate) fn is_match(&self, name: &str) -> bool {
        self.whole.is_match(name)
            || (name.len() == COMM_BYTES && self.cut.as_ref().is_some_and(|c| c.is_match(name)))
    }
}

/// A trigger's condition.
#[derive(Debug, Clone)]
pub enum Condition {
    /// A thread of interest left a CPU idle (each time: the patent's "a
    /// processor going idle", with `every:N` its "every Nth occurrence").
    CpuIdle { who: Interest },
    /// A thread of interest has waited this long.
    Wait { at_least_ns: u64, who: Interest },
    /// This many threads of interest wait at once.
    Waiting { at_least: u32, who: Interest },
    /// The CPUs were idle this share of the last `for_ns`, while
    /// `waiting` threads of interest wait.
    Idle {
        at_least_pct: f64,
        for_ns: u64,
        waiting: Option<(u32, Interest)>,
    },
    /// A CPU has been idle this long while a thread of interest has been
    /// runnable (woken or preempted, not on a CPU) as long: unclaimed idle.
    Unclaimed { at_least_ns: u64, who: Interest },
    /// The machine's pressure stall on `resource` was at least this share
    /// of the last `for_ns`, while the CPUs were idle `idle_pct` of it.
    Pressure {
        resource: Stall,
        at_least_pct: f64,
        for_ns: u64,
        idle_pct: Option<f64>,
    },
    /// This many threads of interest of one pool in turn, each woken from
    /// its wait by the one before: a lock convoy.
    Convoy { threads: u32, who: Interest },
    /// SIGUSR2 (the recording session raises it).
    Signal,
    /// A heartbeat's window had a path above the job's history band (the
    /// recording session judges it: `--heartbeat`, `--history-job`).
    History,
}

/// Which of a trigger's occurrences fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// Every one.
    Always,
    /// Every Nth (`every:N`).
    Every(u32),
    /// Only the Nth (`once-after:N`).
    OnceAfter(u32),
}

/// One `--trigger`: its text and its condition.
#[derive(Debug, Clone)]
pub struct Trigger {
    /// As the user wrote it.
    pub spec: String,
    /// What it means.
    pub condition: Condition,
    /// Which occurrences fire.
    pub rate: Rate,
    /// How long the condition must hold before it counts, ns (`for DUR`
    /// after `waiting>=`/`unclaimed>=`; 0: at once).
    pub sustain_ns: u64,
}

/// A trigger that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("--trigger '{spec}': {why} (e.g. 'cpu-idle every:1000', 'wait>=500ms in http-nio-*', 'waiting>=4 for 2s', 'idle>=40% for 2s while waiting>=4', 'unclaimed>=5ms', 'convoy>=4 in worker-*', 'io-full>=20% while idle>=30%', 'signal', 'history', any of them ending in every:N or once-after:N)")]
pub struct TriggerError {
    spec: String,
    why: String,
}

fn duration_ns(s: &str) -> Result<u64, String> {
    humantime::parse_duration(s)
        .map(|d: Duration| d.as_nanos() as u64)
        .map_err(|e| format!("'{s}' is not a duration ({e})"))
}

/// `in PATTERN` (the rest of the words: thread names have spaces, `H2 TCP
/// Server (`), or nothing; and how many words it took.
fn interest(words: &[&str]) -> Result<(Interest, usize), String> {
    match words {
        ["in", pat @ ..] if !pat.is_empty() => {
            let pat = pat.join(" ");
            NamePattern::new(&pat)
                .map(|g| (Interest::Named(g), words.len()))
                .map_err(|e| format!("'{pat}' is not a name pattern ({e})"))
        }
        ["in"] => Err("'in' needs a thread-name pattern".into()),
        _ => Ok((Interest::Target, 0)),
    }
}

/// The window a share is taken over: `for DUR` at the start of `words`
/// (1 s without), ns, and how many words it took.
fn window(words: &[&str]) -> Result<(u64, usize), String> {
    if words.first() != Some(&"for") {
        return Ok((1_000_000_000, 0));
    }
    let d = words.get(1).ok_or("'for' needs a duration")?;
    Ok((duration_ns(d)?, 2))
}

/// A share like `40%`.
fn share(p: &str) -> Result<f64, String> {
    p.strip_suffix('%')
        .and_then(|v| v.parse().ok())
        .filter(|v: &f64| (0.0..=100.0).contains(v))
        .ok_or_else(|| format!("'{p}' is not a share like 40%"))
}

fn count(s: &str) -> Result<u32, String> {
    s.parse::<u32>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("'{s}' is not a positive number of threads"))
}

impl Trigger {
    /// Reads one trigger.
    pub fn parse(spec: &str) -> Result<Trigger, TriggerError> {
        let err = |why: String| TriggerError {
            spec: spec.to_string(),
            why,
        };
        let mut words: Vec<&str> = spec.split_whitespace().collect();
        let mut rate = Rate::Always;
        if let Some(last) = words.last() {
            let n = |v: &str| {
                v.parse::<u32>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("'{last}' needs a positive count"))
            };
            if let Some(v) = last.strip_prefix("every:") {
                rate = Rate::Every(n(v).map_err(err)?);
                words.pop();
            } else if let Some(v) = last.strip_prefix("once-after:") {
                rate = Rate::OnceAfter(n(v).map_err(err)?);
                words.pop();
            }
        }
        let (first, mut rest) = words.split_first().ok_or_else(|| err("empty".into()))?;
        // `for DUR` right after a sustainable condition.
        let mut sustain_ns = 0;
        if (first.starts_with("waiting>=") || first.starts_with("unclaimed>="))
            && rest.first() == Some(&"for")
        {
            let d = rest
                .get(1)
                .ok_or_else(|| err("'for' needs a duration".into()))?;
            sustain_ns = duration_ns(d).map_err(err)?;
            rest = &rest[2..];
        }
        let (condition, used) = if *first == "cpu-idle" {
            let (who, n) = interest(rest).map_err(err)?;
            (Condition::CpuIdle { who }, n)
        } else if *first == "signal" {
            (Condition::Signal, 0)
        } else if *first == "history" {
            (Condition::History, 0)
        } else if let Some(d) = first.strip_prefix("wait>=") {
            let (who, n) = interest(rest).map_err(err)?;
            (
                Condition::Wait {
                    at_least_ns: duration_ns(d).map_err(err)?,
                    who,
                },
                n,
            )
        } else if let Some(d) = first.strip_prefix("unclaimed>=") {
            let (who, n) = interest(rest).map_err(err)?;
            (
                Condition::Unclaimed {
                    at_least_ns: duration_ns(d).map_err(err)?,
                    who,
                },
                n,
            )
        } else if let Some((stall, p)) = first
            .split_once(">=")
            .and_then(|(w, p)| Some((Stall::parse(w)?, p)))
        {
            let at_least_pct = share(p).map_err(err)?;
            let (for_ns, mut i) = window(rest).map_err(err)?;
            let mut idle_pct = None;
            if rest.get(i) == Some(&"while") {
                let q = rest
                    .get(i + 1)
                    .and_then(|w| w.strip_prefix("idle>="))
                    .ok_or_else(|| err("'while' needs idle>=Q%".into()))?;
                idle_pct = Some(share(q).map_err(err)?);
                i += 2;
            }
            (
                Condition::Pressure {
                    resource: stall,
                    at_least_pct,
                    for_ns: for_ns.max(1),
                    idle_pct,
                },
                i,
            )
        } else if let Some(k) = first.strip_prefix("convoy>=") {
            let threads = count(k)
                .and_then(|k| {
                    (k >= 2)
                        .then_some(k)
                        .ok_or_else(|| "a convoy needs at least 2 threads".to_string())
                })
                .map_err(err)?;
            let (who, used) = interest(rest).map_err(err)?;
            (Condition::Convoy { threads, who }, used)
        } else if let Some(n) = first.strip_prefix("waiting>=") {
            let (who, used) = interest(rest).map_err(err)?;
            (
                Condition::Waiting {
                    at_least: count(n).map_err(err)?,
                    who,
                },
                used,
            )
        } else if let Some(p) = first.strip_prefix("idle>=") {
            let pct = share(p).map_err(err)?;
            let (for_ns, mut i) = window(rest).map_err(err)?;
            let mut waiting = None;
            if rest.get(i) == Some(&"while") {
                let w = rest
                    .get(i + 1)
                    .and_then(|w| w.strip_prefix("waiting>="))
                    .ok_or_else(|| err("'while' needs waiting>=N".into()))?;
                let n = count(w).map_err(err)?;
                let (who, used) = interest(&rest[i + 2..]).map_err(err)?;
                waiting = Some((n, who));
                i += 2 + used;
            }
            (
                Condition::Idle {
                    at_least_pct: pct,
                    for_ns: for_ns.max(1),
                    waiting,
                },
                i,
            )
        } else {
            return Err(err(format!("unknown condition '{first}'")));
        };
        if let Some(extra) = rest.get(used) {
            return Err(err(format!("unexpected '{extra}'")));
        }
        Ok(Trigger {
            spec: spec.split_whitespace().collect::<Vec<_>>().join(" "),
            condition,
            rate,
            sustain_ns,
        })
    }
}
