//! The root causes of idle, under the headline: per root its share, what
//! the root thread did and where, then the chain that led to it from the
//! victims' wait out (`←`, at most three links: the victims', the last,
//! and how many between); then the idle that continued an interrupted
//! one, the largest knot of threads waiting on each other (and how many
//! more there are), and the roots with no stack.
//!
//! Invariant: every line fits in 120 columns; names are fitted into 40.

use std::fmt::{self, Write};

use super::frames::frame_words;
use super::layout::{count, fit, fit_method, write_wrapped};
use crate::path::PathFrame;
use crate::reasons::{KernelReason, Reason};
use crate::sections::idle_paths::PathThreads;
use crate::sections::root_causes::{ChainLink, RootCause, RootCausesSection, RootKind as K};

/// The smallest share of a root shown, % (the JSON and `export -f csv` have
/// them all; how many are shown at most is the caller's).
const ROOT_MIN_SHARE: f64 = 1.0;
/// Knots shown (the largest); the JSON has them all.
const KNOTS_SHOWN: usize = 1;

/// The root causes of idle: the kinds' shares, then each root shown with
/// its chain (`shown` at most; when that is fewer than the `asked`, a line
/// says how many more the report had room for only without the fit), then
/// the notes.
pub(super) fn render_root_causes(
    o: &mut String,
    rc: &RootCausesSection,
    shown: usize,
    asked: usize,
) -> fmt::Result {
    if rc.roots.is_empty() {
        return Ok(());
    }
    writeln!(o, "#")?;
    let part = |ns: u64| part_of(rc, ns);
    let kinds: Vec<String> = [
        ("code paths", rc.by_kind[0]),
        ("devices", rc.by_kind[1]),
        ("CPU contention", rc.by_kind[2]),
        ("unknown", rc.by_kind[3]),
    ]
    .iter()
    .filter(|(_, ns)| part(*ns) >= 0.05)
    .map(|(what, ns)| format!("{what} {:.1} %", part(*ns)))
    .collect();
    let head = format!(
        "Root causes of idle (each idle interval followed down its wait chain): {}",
        kinds.join(", ")
    );
    write_wrapped(o, &head, "#", "#   ")?;
    let shown_roots = || {
        rc.roots
            .iter()
            .take_while(|root| root.share_pct >= ROOT_MIN_SHARE)
    };
    for root in shown_roots().take(shown) {
        render_root(o, root)?;
        render_chain(o, rc, &root.chain)?;
    }
    let left_out = shown_roots().take(asked).count().saturating_sub(shown);
    if left_out > 0 {
        let line = format!(
            "+{left_out} more root cause{} of 1 % or more, left out to keep one screen: --paths N shows them",
            if left_out == 1 { "" } else { "s" }
        );
        write_wrapped(o, &line, "#  ", "#    ")?;
    }
    render_root_notes(o, rc)
}

/// `ns` as a share of the idle the roots explain, %.
pub(crate) fn part_of(rc: &RootCausesSection, ns: u64) -> f64 {
    ns as f64 * 100.0 / rc.idle_ns.max(1) as f64
}

/// The threads in words: the name fitted into 40, `×N` for a pool.
fn who(t: &PathThreads) -> String {
    if t.count > 1 {
        format!("{} ×{}", fit(&t.name, 40), t.count)
    } else {
        fit(&t.name, 40)
    }
}

/// ` in FRAME` where there is a frame.
fn at(f: Option<&PathFrame>) -> String {
    f.map(|f| format!(" in {}", frame_words(&f.frame)))
        .unwrap_or_default()
}

/// A root's line: its share, what its threads did, where, and where they
/// released the waiters.
fn render_root(o: &mut String, root: &RootCause) -> fmt::Result {
    let first = format!("# {:>5.1} %", root.share_pct);
    write_wrapped(o, &root_words(root), &first, "#          ")
}

/// A root in words: what its threads did, where, and where they released
/// the waiters (names fitted into 40).
pub(crate) fn root_words(root: &RootCause) -> String {
    // Frames that are the release site's are told as such.
    let frame = if root.frames_from_release {
        String::new()
    } else {
        at(root.frame())
    };
    let released = root
        .release
        .as_ref()
        // Only where the release is in the program's code.
        .filter(|r| r.program_frame.is_some())
        .and_then(|r| r.frame())
        .filter(|f| root.frames_from_release || root.frame().map(|g| &g.frame) != Some(&f.frame))
        .map(|f| format!("; released the waiters in {}", frame_words(&f.frame)))
        .unwrap_or_default();
    let object = if root.object.is_empty() {
        String::new()
    } else {
        format!(" on {}", fit_method(&root.object, 40))
    };
    let words = match root.kind {
        K::Path => format!(
            "{} running{frame} (its next wait: {})",
            who(&root.threads),
            root.reason.replace("running, then ", "")
        ),
        K::Device => format!(
            "{} {}{object}{frame}, ended by the {}",
            who(&root.threads),
            root.reason,
            root.device.as_deref().unwrap_or("interrupt")
        ),
        K::Contention => format!(
            "{} runnable, not yet on a CPU (waking up, or CPU contention)",
            who(&root.threads)
        ),
        K::Unknown => format!(
            "{} {}{object}{frame}, no waker seen",
            who(&root.threads),
            root.reason
        ),
    };
    words + &released
}

/// A root's chain, from the victims' wait out: the first and the last
/// link, and how many between.
fn render_chain(o: &mut String, rc: &RootCausesSection, chain: &[ChainLink]) -> fmt::Result {
    let n = chain.len();
    for (i, link) in chain.iter().enumerate().rev() {
        if n > 3 && i > 0 && i < n - 1 {
            if i == n - 2 {
                writeln!(o, "#         ← … {} more links", n - 2)?;
            }
            continue;
        }
        let line = format!(
            "← {} [{:.1} %]",
            link_words(link),
            part_of(rc, link.idle_ns)
        );
        write_wrapped(o, &line, "#        ", "#            ")?;
    }
    Ok(())
}

/// A link of a chain in words: its threads waiting, why, on what, where,
/// and the convoy it made (names fitted into 40).
pub(crate) fn link_words(link: &ChainLink) -> String {
    let object = if link.object.is_empty() {
        String::new()
    } else {
        format!(" on {}", fit_method(&link.object, 40))
    };
    let convoy = if link.hops > 1 {
        format!(", a convoy of up to {} hand-offs", link.hops)
    } else {
        String::new()
    };
    // A futex's address says the wait was a futex wait.
    let futex_wait = link.reason == Reason::Kernel(KernelReason::FutexWait);
    let reason = if link.object.starts_with("futex ") && futex_wait {
        String::new()
    } else {
        format!(" ({})", link.reason)
    };
    format!(
        "{} waiting{reason}{object}{}{convoy}",
        who(&link.threads),
        at(link.frame())
    )
}

/// The notes after the roots: idle that continued an interrupted idle,
/// the knots, the roots with no stack.
fn render_root_notes(o: &mut String, rc: &RootCausesSection) -> fmt::Result {
    let part = |ns: u64| part_of(rc, ns);
    if part(rc.continued_ns) >= 0.05 {
        let line = format!(
            "{:.1} % of idle followed interrupt-woken threads that woke no one ({} times): charged to the idle they \
             interrupted",
            part(rc.continued_ns),
            count(rc.continued_intervals)
        );
        write_wrapped(o, &line, "#  ", "#    ")?;
    }
    let knots = &rc.wait_graph.knots;
    for k in knots.iter().take(KNOTS_SHOWN) {
        let waits = if k.waits_on.is_empty() {
            String::new()
        } else {
            format!(", waiting on {}", k.waits_on.join(", "))
        };
        let more = if knots.len() > KNOTS_SHOWN {
            let n = knots.len() - KNOTS_SHOWN;
            format!(
                " ({n} more knot{}: --format json)",
                if n == 1 { "" } else { "s" }
            )
        } else {
            String::new()
        };
        let line = format!(
            "knot (threads that wait only on each other or on devices): {} — {:.1} % of the idle ends in it{waits}{more}",
            k.pools.join(" + "),
            k.share_pct
        );
        write_wrapped(o, &line, "#  ", "#    ")?;
    }
    if part(rc.no_stack_ns) >= 1.0 && !rc.stacks_at_waits {
        let line = format!(
            "{:.1} % of the idle ends in a root with no stack: stacks were taken only where a CPU went idle; \
             record with --stacks waits for every root's frames",
            part(rc.no_stack_ns)
        );
        write_wrapped(o, &line, "#  ", "#    ")?;
    }
    Ok(())
}
