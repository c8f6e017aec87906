//! The text report's layout: the width every line fits in, numbers in
//! words (`12.345` ms, `1,234` counts), strings fitted or wrapped into a
//! width, and the writing of wrapped lines.
//!
//! Invariant: whatever leaves this module through [`fit`], [`fit_method`]
//! or [`wrap`] is at most the width asked for, in characters; the other
//! modules of the text report write nothing wider than [`WIDTH`].

use std::fmt::{self, Write};

/// The width every line of the text report fits in.
pub const WIDTH: usize = 120;

/// Width of the thread-name column.
pub(super) const COMM: usize = 20;

/// `ns` in ms, three decimals.
pub(super) fn ms(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e6)
}

/// A threshold in ms, without trailing zeros: `10`, `0.5`.
pub(super) fn ms_short(ns: u64) -> String {
    let s = ms(ns);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `n` with thousands separators: `1,234,567`.
pub(super) fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A space [`wrap`] never breaks a line at (`0.6{GLUE}%`): it prints as one.
pub(super) const GLUE: char = '\u{1f}';

/// `text` as lines of at most `width` characters, broken at spaces, the
/// first starting with `first`, the others with `rest` (a word longer than
/// a line is cut by [`fit`]).
pub(crate) fn wrap(text: &str, first: &str, rest: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = first.to_string();
    let mut words = 0;
    for word in text.split_whitespace() {
        if words > 0 && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::replace(&mut line, rest.to_string()));
            words = 0;
        }
        line.push(' ');
        line.extend(word.chars().map(|c| if c == GLUE { ' ' } else { c }));
        words += 1;
    }
    lines.push(line);
    lines.into_iter().map(|l| fit(&l, width)).collect()
}

/// Writes `lines`, each after `indent` spaces.
pub(super) fn write_lines(
    o: &mut String,
    indent: usize,
    lines: impl IntoIterator<Item = String>,
) -> fmt::Result {
    for l in lines {
        writeln!(o, "{:indent$}{l}", "")?;
    }
    Ok(())
}

/// Writes `text` [`wrap`]ped into [`WIDTH`]: the first line starting with
/// `first`, the others with `rest`.
pub(super) fn write_wrapped(o: &mut String, text: &str, first: &str, rest: &str) -> fmt::Result {
    write_lines(o, 0, wrap(text, first, rest, WIDTH))
}

/// `s` fitted into `width` characters: a longer one keeps its start and
/// its end around `…` (a pool thread's number, a command's last argument).
pub(super) fn fit(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_string();
    }
    let head = (width.saturating_sub(1) * 2) / 3;
    let tail = width.saturating_sub(1 + head);
    let start: String = s.chars().take(head).collect();
    let end: String = s.chars().skip(n - tail).collect();
    format!("{start}…{end}")
}

/// A Java method name fitted into `width` characters: package names
/// abbreviated from the left (`org.apache.catalina.X.m` → `o.a.catalina.X.m`),
/// then, if still too long, cut from the left behind `…`. The class and
/// method stay whole where they fit. JSON carries every name in full.
pub(super) fn fit_method(name: &str, width: usize) -> String {
    let len = |s: &str| s.chars().count();
    if len(name) <= width {
        return name.to_string();
    }
    let mut parts: Vec<String> = name.split('.').map(str::to_string).collect();
    // Keep `Class.method` (the last two parts) whole.
    for i in 0..parts.len().saturating_sub(2) {
        if let Some(c) = parts[i].chars().next() {
            parts[i] = c.to_string();
        }
        let joined = parts.join(".");
        if len(&joined) <= width {
            return joined;
        }
    }
    let joined = parts.join(".");
    let keep = width.saturating_sub(1);
    let tail: String = joined
        .chars()
        .skip(len(&joined).saturating_sub(keep))
        .collect();
    format!("…{tail}")
}

#[cfg(test)]
mod tests {
    use super::{count, fit_method, wrap};

    #[test]
    fn long_java_names_are_shortened_from_the_left() {
        let n = "org.apache.tomcat.util.buf.StringCache.toString";
        assert_eq!(fit_method(n, 80), n);
        assert_eq!(
            fit_method(n, 40),
            "o.a.tomcat.util.buf.StringCache.toString"
        );
        assert_eq!(fit_method(n, 33), "o.a.t.u.buf.StringCache.toString");
        assert_eq!(fit_method(n, 30), "o.a.t.u.b.StringCache.toString");
        let cut = fit_method(n, 20);
        assert_eq!(cut.chars().count(), 20);
        assert!(
            cut.starts_with('…') && cut.ends_with("Cache.toString"),
            "{cut}"
        );
    }

    #[test]
    fn notes_wrap_at_spaces() {
        let lines = wrap("aaa bbb ccc ddd", "#", "#  ", 9);
        assert_eq!(lines, ["# aaa bbb", "#   ccc", "#   ddd"]);
        assert_eq!(wrap("x", "# NOTE:", "#", 120), ["# NOTE: x"]);
    }

    #[test]
    fn thousands() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1234567), "1,234,567");
    }
}
