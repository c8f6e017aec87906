//! Frames in words: a frame's name with its line and how Java code ran
//! (`Ledger.post:74 [jit]`), and the frames of a merged path the text
//! shows. The comparison texts (`compare/`) word frames the same way.
//!
//! Invariant: a path's shown frames are its kernel wait, then at most
//! [`MERGED_FRAMES`] frames around the program's own code, `…` wherever
//! frames are left out.

use crate::path::{Frame, FrameKind as K, PathFrame};

/// Frames shown per merged path (JSON has all).
const MERGED_FRAMES: usize = 9;

/// A frame in words: its name, `:line` where known, `[jit]`,
/// `[interpreted]`, `[inlined]` for how Java code ran.
pub(crate) fn frame_words(f: &Frame) -> String {
    let mut s = f.name.clone();
    if f.line > 0 {
        s.push_str(&format!(":{}", f.line));
    }
    match f.kind {
        K::Jit => s.push_str(" [jit]"),
        K::Interpreted => s.push_str(" [interpreted]"),
        K::Inlined => s.push_str(" [inlined]"),
        _ => {}
    }
    s
}

/// The frames of a path the text shows: the kernel's wait, then up to
/// [`MERGED_FRAMES`] from two before the program's first frame (at
/// `program_frame`), `…` where frames are left out.
pub(crate) fn shown_frames_of(f: &[PathFrame], program_frame: Option<usize>) -> Vec<String> {
    let mut out = Vec::new();
    let user = f
        .iter()
        .position(|x| x.frame.kind != K::Kernel)
        .unwrap_or(f.len());
    if user > 0 {
        out.push(frame_words(&f[0].frame));
    }
    let start = program_frame.map_or(user, |i| i.saturating_sub(2).max(user));
    if start > user || (user > 1 && start == user && start < f.len()) {
        out.push("…".into());
    }
    let end = (start + MERGED_FRAMES).min(f.len());
    out.extend(f[start..end].iter().map(|x| frame_words(&x.frame)));
    if end < f.len() {
        out.push(format!("… {} more", f.len() - end));
    }
    out
}
