//! One direction: no source file of the workspace reaches back to itself
//! through the files it uses (`use crate::…`, `super::…`, paths in code),
//! and in the post-processor no layer uses a layer above it
//! ([`POSTPROC_LAYERS`]; `docs/ARCHITECTURE.md`). Run it alone with
//! `cargo test --test layers`; it reads source files only.
//!
//! A file's module is its path under `src/` (`pass/blame.rs` is
//! `pass::blame`, `pass/mod.rs` is `pass`); a reference names the longest
//! module that exists. Comments, string literals and the `#[cfg(test)]`
//! module at the end of a file are not read: a unit test may use anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates' `src` folders, found from the workspace root.
fn source_roots() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name();
            let name = name.to_string_lossy();
            if !p.is_dir() || name.starts_with('.') || name == "target" || name == "fuzz" {
                continue;
            }
            if name == "src" && dir.join("Cargo.toml").exists() {
                out.push(p);
            } else {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file under `src` (`[]` for the crate root).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    let top_root = parts.is_empty() && (stem == "lib" || stem == "main");
    if !(top_root || stem == "mod") {
        parts.push(stem.to_string());
    }
    parts
}

/// The code of a file without comments, string and char literals, and
/// without its trailing `#[cfg(test)]` module.
fn code_of(text: &str) -> String {
    let text = match text.find("\n#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    };
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'r' if b.get(i + 1) == Some(&b'#')
                || (b.get(i + 1) == Some(&b'"')
                    && (i == 0 || !b[i - 1].is_ascii_alphanumeric())) =>
            {
                // A raw string: r"…", r#"…"#.
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                j += 1;
                loop {
                    if j >= b.len() {
                        break;
                    }
                    if b[j] == b'"'
                        && b[j + 1..]
                            .iter()
                            .take(hashes)
                            .filter(|&&c| c == b'#')
                            .count()
                            == hashes
                    {
                        j += 1 + hashes;
                        break;
                    }
                    j += 1;
                }
                out.push_str("\"\"");
                i = j;
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}'), not a lifetime ('a).
                let close = if b.get(i + 1) == Some(&b'\\') {
                    b[i + 2..]
                        .iter()
                        .position(|&c| c == b'\'')
                        .map(|p| i + 2 + p)
                } else if b.get(i + 2) == Some(&b'\'') {
                    Some(i + 2)
                } else {
                    None
                };
                match close {
                    Some(c) => {
                        out.push_str("' '");
                        i = c + 1;
                    }
                    None => {
                        out.push('\'');
                        i += 1;
                    }
                }
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

fn ident_at(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// The module paths a piece of code names after `crate::` or `super::`
/// (relative to `here`), grouped imports (`crate::{a::X, b}`) expanded.
fn referenced(code: &str, here: &[String]) -> Vec<Vec<String>> {
    fn paths(s: &str, base: Vec<String>, out: &mut Vec<Vec<String>>) {
        // s starts right after a `::`.
        let s = s.trim_start();
        if let Some(rest) = s.strip_prefix('{') {
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in rest.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        paths(&rest[start..i], base.clone(), out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        paths(&rest[start..i], base.clone(), out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let mut path = base;
        let mut s = s;
        while let Some(id) = ident_at(s) {
            if id == "self" {
                break;
            }
            path.push(id.to_string());
            s = s[id.len()..].trim_start();
            match s.strip_prefix("::") {
                Some(rest) if rest.trim_start().starts_with('{') => {
                    paths(rest, path, out);
                    return;
                }
                Some(rest) => s = rest.trim_start(),
                None => break,
            }
        }
        out.push(path);
    }
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        paths(&code[i + "crate::".len()..], Vec::new(), &mut out);
    }
    for (i, _) in code.match_indices("super::") {
        let before = code[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        // `super` of `a/b.rs` (module a::b) and of `a/b/mod.rs` (also
        // a::b) is `a`.
        let mut base = here.to_vec();
        base.pop();
        let mut rest = &code[i + "super::".len()..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        paths(rest, base, &mut out);
    }
    out
}

/// One crate's file graph: module → the modules its code names.
fn graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    // Test modules kept in files of their own (`pass/tests/carried.rs`,
    // declared under `#[cfg(test)]`) are left out, as inline ones are
    // (`code_of`): tests may use any layer to check theirs.
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|f| (module_of(src, f), f.clone()))
        .filter(|(m, _)| !m.iter().any(|part| part == "tests"))
        .collect();
    let mut g = BTreeMap::new();
    for (m, f) in &modules {
        let code = code_of(&std::fs::read_to_string(f).unwrap());
        let mut deps = BTreeSet::new();
        for mut p in referenced(&code, m) {
            while !p.is_empty() && !modules.contains_key(&p) {
                p.pop();
            }
            // A module naming itself or its own folder's root is no edge;
            // the crate root is the crate's index, not a layer.
            if p != *m && !p.is_empty() {
                deps.insert(p);
            }
        }
        g.insert(m.clone(), deps);
    }
    g
}

/// The circles of a graph: its strongly connected components of more than
/// one module (Tarjan's algorithm).
fn circles(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<String>>,
    }
    impl<'a> T<'a> {
        fn visit(&mut self, v: &'a Vec<String>) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in &self.g[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on.remove(w);
                    scc.push(w.join("::"));
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

#[test]
fn no_source_file_reaches_back_to_itself() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let roots = source_roots();
    assert!(
        roots.len() >= 8,
        "found only {} crates: {roots:?}",
        roots.len()
    );
    let mut found = Vec::new();
    for src in &roots {
        for c in circles(&graph(src)) {
            let folder = src.strip_prefix(root).unwrap().display();
            found.push(format!("{folder}: {}", c.join(", ")));
        }
    }
    assert!(
        found.is_empty(),
        "files that import each other in a circle:\n{}",
        found.join("\n")
    );
}

/// The post-processor's layers, bottom first: a module may use its own
/// layer's and the layers below it, never one above.
const POSTPROC_LAYERS: &[&[&str]] = &[
    &["share", "path", "reasons"],
    &["pass"],
    &["sections"],
    &["render"],
    &["compare"],
];

fn layer_of(module: &[String]) -> Option<usize> {
    let top = module.first()?;
    POSTPROC_LAYERS
        .iter()
        .position(|l| l.contains(&top.as_str()))
}

#[test]
fn no_postproc_layer_uses_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("postproc/src");
    let g = graph(&src);
    let mut up = Vec::new();
    for (m, deps) in &g {
        let Some(lm) = layer_of(m) else {
            assert!(
                m.is_empty(),
                "postproc/src/{}: in no layer of POSTPROC_LAYERS",
                m.join("/")
            );
            continue;
        };
        for d in deps {
            if layer_of(d).is_some_and(|ld| ld > lm) {
                up.push(format!("{} uses {}", m.join("::"), d.join("::")));
            }
        }
    }
    assert!(
        up.is_empty(),
        "a layer uses one above it:\n{}",
        up.join("\n")
    );
}

#[test]
fn the_checker_sees_a_circle_and_grouped_imports() {
    let here = vec!["pass".to_string(), "blame".to_string()];
    let code = code_of(
        "use crate::{sections::{root::X, y}, share::pct};\n// crate::render::text\n\
         let s = \"crate::compare\"; let c = 'x'; fn f<'a>() { super::idle_paths::K; crate::path::roots(); }\n\
         #[cfg(test)]\nmod tests { use crate::render; }",
    );
    let mut r = referenced(&code, &here);
    r.sort();
    let names: Vec<String> = r.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        names,
        [
            "pass::idle_paths::K",
            "path::roots",
            "sections::root::X",
            "sections::y",
            "share::pct"
        ]
    );
    let v = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    let g: BTreeMap<_, BTreeSet<_>> = [
        (v("a"), [v("b")].into()),
        (v("b"), [v("c")].into()),
        (v("c"), [v("a")].into()),
        (v("d"), [v("a")].into()),
    ]
    .into();
    assert_eq!(
        circles(&g),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
}
