//! The Java frames the recorder walked from a JVM's structures at a
//! switch-out (`idleflow_format::walked`), as user frames: what replaces
//! the JIT and interpreter frames of that switch-out's stack copy.
//!
//! A compiled frame and the methods inlined into it at its pc are one
//! frame, as a perf map names them: the compiled method, then the inlined
//! ones outermost first; an interpreted or native method's frame is its
//! method. Each is named without its parameters (`pkg.Class.method`), as
//! the flight recorder and the JVM's own waits (`recorder/vm_waits.rs`)
//! name it: one method, one name, whichever source named it.
//!
//! Invariant: every walked frame is in exactly one user frame, in order.

use idleflow_format::{CodeKind, FrameKind, WalkedStack};

use crate::symbols::Frames;

/// The user frame ids of walked stack `s`, innermost first.
pub fn user_frames(frames: &mut Frames, s: &WalkedStack) -> Vec<u64> {
    let mut out = Vec::new();
    // Inlined frames wait for the compiled frame that holds them.
    let mut inlined: Vec<&idleflow_format::WalkedFrame> = Vec::new();
    for f in &s.frames {
        if f.kind == FrameKind::Inlined {
            inlined.push(f);
            continue;
        }
        let kind = match f.kind {
            FrameKind::Interpreted => CodeKind::Interpreted,
            _ => CodeKind::Jit,
        };
        let id = if inlined.is_empty() {
            frames.java(kind, bare(&f.method), Vec::new(), f.line)
        } else {
            let line = inlined[0].line;
            let chain = inlined.iter().rev().map(|i| bare(&i.method)).collect();
            let id = frames.java(kind, bare(&f.method), chain, line);
            inlined.clear();
            id
        };
        out.push(id);
    }
    // Inlined frames with no compiled frame after them (a walk cut short).
    for f in inlined {
        out.push(frames.java(CodeKind::Jit, bare(&f.method), Vec::new(), f.line));
    }
    out
}

/// `a.B.m(int)` → `a.B.m`.
fn bare(method: &str) -> String {
    method
        .split_once('(')
        .map_or(method, |(m, _)| m)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use idleflow_format::WalkedFrame;

    fn frame(kind: FrameKind, method: &str, line: u32) -> WalkedFrame {
        WalkedFrame {
            kind,
            method: method.into(),
            line,
        }
    }

    #[test]
    fn inlined_methods_join_the_compiled_frame_that_holds_them() {
        let s = WalkedStack {
            id: 1,
            complete: true,
            frames: vec![
                frame(FrameKind::Native, "U.park(boolean, long)", 0),
                frame(FrameKind::Inlined, "L.park(java.lang.Object)", 221),
                frame(FrameKind::Inlined, "Q.take()", 70),
                frame(FrameKind::Jit, "W.run()", 12),
                frame(FrameKind::Interpreted, "T.run()", 840),
            ],
        };
        let mut frames = Frames::new(0);
        let ids = user_frames(&mut frames, &s);
        assert_eq!(ids.len(), 3);
        // The same frames again are the same ids.
        assert_eq!(user_frames(&mut frames, &s), ids);
        let table = frames.finish(&mut Vec::new()).frames;
        let f = |id: u64| &table[id as usize - 1];
        assert_eq!(
            (f(ids[0]).name.as_str(), f(ids[0]).kind),
            ("U.park", CodeKind::Jit)
        );
        assert_eq!(f(ids[1]).name, "W.run");
        assert_eq!(f(ids[1]).inlined, ["Q.take", "L.park"]);
        assert_eq!(f(ids[1]).line, 221);
        assert_eq!(
            (f(ids[2]).name.as_str(), f(ids[2]).kind),
            ("T.run", CodeKind::Interpreted)
        );
    }
}
