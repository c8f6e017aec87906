//! The frames of the unwound stacks: each address placed in what ran there
//! (a module's code, JIT code named by a perf map, or nothing known),
//! interned, and named once at the end with blazesym (ELF symbols, DWARF
//! with inlined functions and lines where the file has them).
//!
//! Invariant: a frame is (module, address in the module's numbering);
//! module and frame ids start at 1 and are handed out in first-use order;
//! a module whose file is missing, unreadable or rebuilt (another build id)
//! keeps its frames as module + offset, with a note, never a wrong name.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use idleflow_format::{CodeKind, UserFrame, UserModule, UserSymbols};
use rustc_hash::FxHashMap;

use crate::elf::{ElfCache, ElfFile};
use crate::maps::{Mapping, Space};
use crate::perfmap::PerfMap;

/// What a module id stands for.
#[derive(Debug)]
struct ModuleEntry {
    info: UserModule,
    /// The file, when it could be read and matches.
    elf: Option<Arc<ElfFile>>,
}

/// The frames seen so far.
#[derive(Debug, Default)]
pub struct Frames {
    modules: Vec<ModuleEntry>,
    module_ids: FxHashMap<(Arc<str>, u64), u64>,
    ids: FxHashMap<(u64, u64), u64>,
    frames: Vec<UserFrame>,
    perf_maps: FxHashMap<u32, Option<(u64, Arc<PerfMap>)>>,
    /// Java frames walked from a JVM's structures, by what names them.
    java_ids: FxHashMap<(CodeKind, String, Vec<String>, u32), u64>,
    /// When the recording began, ns since the epoch.
    since_unix_ns: u64,
    /// Frames in no module and no perf map.
    pub unknown: u64,
    /// Perf maps not read, and why (lines of the recording's header).
    ignored_perf_maps: Vec<String>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Frames {
    fn module(&mut self, m: &Mapping, pid: u32, elves: &mut ElfCache) -> u64 {
        let path = &m.path;
        let key = (path.clone(), m.ino);
        if let Some(&id) = self.module_ids.get(&key) {
            return id;
        }
        let file = m.is_file().then(|| elves.get(path, pid, m.start..m.end));
        let id = self.modules.len() as u64 + 1;
        let (elf, note) = if let Some(file) = file {
            match file {
                Ok(elf) if m.ino != 0 && elf.ino != m.ino => (
                    None,
                    format!(
                        "the file was replaced since it was mapped (inode {} then, {} now: rebuilt?)",
                        m.ino, elf.ino
                    ),
                ),
                Ok(elf) => (Some(elf), String::new()),
                Err(e) => (None, format!("not read: {e}")),
            }
        } else {
            (None, String::new())
        };
        let recorded = elf.as_ref().map(|e| hex(&e.build_id)).unwrap_or_default();
        self.modules.push(ModuleEntry {
            info: UserModule {
                id,
                path: path.to_string(),
                build_id: recorded,
                note,
            },
            elf,
        });
        self.module_ids.insert(key, id);
        id
    }

    /// Frames of a recording that began at `since_unix_ns` (ns since the
    /// epoch): perf maps older than that are not its processes'.
    pub fn new(since_unix_ns: u64) -> Self {
        Frames {
            since_unix_ns,
            ..Default::default()
        }
    }

    fn intern(&mut self, module: u64, addr: u64, kind: CodeKind, name: &str) -> u64 {
        if let Some(&id) = self.ids.get(&(module, addr)) {
            return id;
        }
        let id = self.frames.len() as u64 + 1;
        self.frames.push(UserFrame {
            id,
            kind,
            module,
            addr,
            name: name.to_string(),
            inlined: Vec::new(),
            file: String::new(),
            line: 0,
        });
        self.ids.insert((module, addr), id);
        id
    }

    /// A Java frame named from its JVM's structures (`crate::java`): no
    /// module, no address; one id per name, inlined methods, line and kind.
    pub fn java(&mut self, kind: CodeKind, name: String, inlined: Vec<String>, line: u32) -> u64 {
        let key = (kind, name, inlined, line);
        if let Some(&id) = self.java_ids.get(&key) {
            return id;
        }
        let id = self.frames.len() as u64 + 1;
        self.frames.push(UserFrame {
            id,
            kind,
            module: 0,
            addr: 0,
            name: key.1.clone(),
            inlined: key.2.clone(),
            file: String::new(),
            line,
        });
        self.java_ids.insert(key, id);
        id
    }

    /// The frame of `addr` in thread-process `pid`, whose mappings are
    /// `space`.
    pub fn frame(&mut self, pid: u32, space: &Space, elves: &mut ElfCache, addr: u64) -> u64 {
        if let Some(m) = space.find(addr).filter(|m| m.is_file()) {
            let (start, pgoff) = (m.start, m.pgoff);
            let module = self.module(m, pid, elves);
            let entry = &self.modules[module as usize - 1];
            // The file's own address where it could be read, else the
            // offset in the file.
            let local = match entry.elf.as_ref().and_then(|e| e.bias(start, pgoff)) {
                Some(bias) => addr.wrapping_sub(bias),
                None => addr - start + pgoff,
            };
            return self.intern(module, local, CodeKind::Native, "");
        }
        if let Some((module, map)) = self.perf_map(pid) {
            if let Some((_, name)) = map.find(addr) {
                let kind = if name.starts_with("Interpreter") {
                    CodeKind::Interpreted
                } else {
                    CodeKind::Jit
                };
                // `Outer.m()->Inner.n()`: the compiled method, and the
                // methods inlined into it at this call site, outermost first.
                let mut chain = name.split(crate::perfmap::INLINED).map(str::to_string);
                let name = chain.next().unwrap_or_default();
                let inlined: Vec<String> = chain.collect();
                let id = self.intern(module, addr, kind, &name);
                if let Some(f) = self.frames.get_mut(id as usize - 1) {
                    f.inlined = inlined;
                }
                return id;
            }
        }
        self.unknown += 1;
        let module = match space.find(addr) {
            // `[vdso]`, `//anon`, a memfd: a module without a file.
            Some(m) => self.module(m, pid, elves),
            None => 0,
        };
        self.intern(module, addr, CodeKind::Unknown, "")
    }

    /// The perf map of `pid` (read once), with its module id: only one
    /// written since the recording began (an older file is another process
    /// that had the same pid).
    fn perf_map(&mut self, pid: u32) -> Option<(u64, Arc<PerfMap>)> {
        if let Some(m) = self.perf_maps.get(&pid) {
            return m.clone();
        }
        let path = format!("/tmp/perf-{pid}.map");
        let fresh = std::fs::symlink_metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .is_some_and(|t| t.as_nanos() as u64 >= self.since_unix_ns);
        let read = fresh.then(|| PerfMap::read_untrusted(Path::new(&path), pid));
        if let Some(Err(why)) = &read {
            if self.ignored_perf_maps.len() < 100 {
                self.ignored_perf_maps
                    .push(format!("perf map of {pid} ignored: {why}"));
            }
        }
        let found = read
            .and_then(Result::ok)
            .filter(|m| !m.is_empty())
            .map(|m| {
                let id = self.modules.len() as u64 + 1;
                self.modules.push(ModuleEntry {
                    info: UserModule {
                        id,
                        path: path.clone(),
                        build_id: String::new(),
                        note: String::new(),
                    },
                    elf: None,
                });
                (id, Arc::new(m))
            });
        self.perf_maps.insert(pid, found.clone());
        found
    }

    /// Names every native frame and hands out the whole table.
    pub fn finish(mut self, notes: &mut Vec<String>) -> UserSymbols {
        notes.append(&mut self.ignored_perf_maps);
        let symbolizer = Symbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .build();
        // Native frames per module, in address order.
        let mut per_module: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, f) in self.frames.iter().enumerate() {
            if f.kind == CodeKind::Native {
                per_module.entry(f.module).or_default().push(i);
            }
        }
        for (module, idx) in per_module {
            let Some(elf) = self.modules[module as usize - 1].elf.clone() else {
                continue;
            };
            let addrs: Vec<u64> = idx.iter().map(|&i| self.frames[i].addr).collect();
            let src = Source::Elf(Elf::new(&elf.path));
            match symbolizer.symbolize(&src, Input::VirtOffset(&addrs)) {
                Ok(found) => {
                    for (&i, s) in idx.iter().zip(found) {
                        if let Symbolized::Sym(sym) = s {
                            let f = &mut self.frames[i];
                            f.name = sym.name.into_owned();
                            // An alias inlined into itself (`__GI___libc_read`
                            // in libc's read) is one function, not two.
                            let mut inlined: Vec<String> = Vec::new();
                            for x in sym.inlined.iter() {
                                let outer = inlined.last().unwrap_or(&f.name);
                                if x.name != outer.as_str() {
                                    inlined.push(x.name.to_string());
                                }
                            }
                            f.inlined = inlined;
                            let code = sym
                                .inlined
                                .last()
                                .and_then(|x| x.code_info.as_ref())
                                .or(sym.code_info.as_deref());
                            if let Some(c) = code {
                                f.file = Path::new(&c.file).display().to_string();
                                f.line = c.line.unwrap_or(0);
                            }
                        }
                    }
                }
                Err(e) => {
                    let m = &mut self.modules[module as usize - 1].info;
                    m.note = format!("not symbolized: {e}");
                }
            }
        }
        for m in &self.modules {
            if !m.info.note.is_empty() {
                notes.push(format!("{}: {}", m.info.path, m.info.note));
            }
        }
        UserSymbols {
            modules: self.modules.into_iter().map(|m| m.info).collect(),
            frames: self.frames,
            counts: Default::default(),
            notes: Vec::new(),
        }
    }
}
