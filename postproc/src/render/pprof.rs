//! The merged idle-causing paths as a pprof profile (`profile.proto`), for
//! `go tool pprof`, Pyroscope, Parca, Grafana and speedscope.
//!
//! One sample per merged path ([`crate::sections::idle_paths::IdlePath`]) with two
//! values, the idle that followed (nanoseconds, the default) and the
//! dispatches to idle; its locations are the path's frames, innermost
//! first as pprof wants them; process, thread (or pool), reason and object
//! are labels (`go tool pprof -tagroot=thread` puts them back on top). A
//! frame becomes one location with one line of one function (name, file
//! and line where the source said); native frames of a module get that
//! module's mapping, so pprof tells the program's code from the libraries'.
//! A path without frames gets one, `[no stack]`, so its idle still shows.
//!
//! Invariants: the string table starts with ""; ids of functions,
//! locations and mappings start at 1 and are unique; the samples' idle
//! adds up to the report's explained idle (`idle_paths.explained_ns`).

use std::io::Write;

use idleflow_export::pprof::{
    Function, Label, Line, Location, Mapping, Profile, Sample, ValueType,
};
use idleflow_export::Message;
use rustc_hash::FxHashMap;

use crate::path::FrameKind;
use crate::path::PathFrame;
use crate::sections::idle_paths::IdlePath;
use crate::sections::Report;

/// Strings, functions, locations and mappings, each interned once.
#[derive(Default)]
struct Tables {
    strings: Vec<String>,
    string_ids: FxHashMap<String, i64>,
    functions: Vec<Function>,
    function_ids: FxHashMap<(String, String), u64>,
    locations: Vec<Location>,
    location_ids: FxHashMap<(FrameKind, String, String, u32, String), u64>,
    mappings: Vec<Mapping>,
    mapping_ids: FxHashMap<String, u64>,
}

impl Tables {
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    fn mapping(&mut self, module: &str) -> u64 {
        if let Some(&id) = self.mapping_ids.get(module) {
            return id;
        }
        let id = self.mappings.len() as u64 + 1;
        let filename = self.string(module);
        self.mappings.push(Mapping {
            id,
            filename,
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            ..Default::default()
        });
        self.mapping_ids.insert(module.to_string(), id);
        id
    }

    /// The name a frame reads under in pprof: a kernel frame is marked as
    /// perf marks it, so `-focus`/`-ignore` can tell the kernel's.
    fn display_name(f: &PathFrame) -> String {
        match f.frame.kind {
            FrameKind::Kernel => format!("{} [kernel]", f.frame.name),
            _ => f.frame.name.clone(),
        }
    }

    fn location(&mut self, f: &PathFrame) -> u64 {
        let name = Self::display_name(f);
        let key = (
            f.frame.kind,
            name.clone(),
            f.frame.file.clone(),
            f.frame.line,
            f.module.clone(),
        );
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let function_id = match self.function_ids.get(&(name.clone(), f.frame.file.clone())) {
            Some(&id) => id,
            None => {
                let id = self.functions.len() as u64 + 1;
                let (n, file) = (self.string(&name), self.string(&f.frame.file));
                self.functions.push(Function {
                    id,
                    name: n,
                    system_name: n,
                    filename: file,
                    start_line: 0,
                });
                self.function_ids
                    .insert((name.clone(), f.frame.file.clone()), id);
                id
            }
        };
        let mapping_id = if f.module.is_empty() || f.frame.kind == FrameKind::Kernel {
            0
        } else {
            self.mapping(&f.module)
        };
        let id = self.locations.len() as u64 + 1;
        self.locations.push(Location {
            id,
            mapping_id,
            address: 0,
            line: vec![Line {
                function_id,
                line: i64::from(f.frame.line),
            }],
            is_folded: false,
        });
        self.location_ids.insert(key, id);
        id
    }

    fn label(&mut self, key: &str, value: &str) -> Label {
        Label {
            key: self.string(key),
            str: self.string(value),
            num: 0,
            num_unit: 0,
        }
    }
}

/// The profile of `report`'s merged paths (see the module documentation).
pub fn profile(report: &Report) -> Profile {
    let command = if report.command.is_empty() {
        "system-wide or --pid".to_string()
    } else {
        report.command.join(" ")
    };
    let comments = [
        format!(
            "idleflow: the idle that followed each idle-causing path; {} on {} CPUs ({})",
            report.hostname, report.cpus, report.kernel_release
        ),
        format!("command: {command}"),
    ];
    profile_of(
        &report.idle_paths.paths,
        (report.start_unix_ns, report.duration_ns),
        &comments,
    )
}

/// The profile of `paths`, recorded over `(start, length)` (ns since the
/// epoch, ns), with `comments`.
pub fn profile_of(paths: &[IdlePath], (start, length): (u64, u64), comments: &[String]) -> Profile {
    let mut t = Tables::default();
    t.string("");
    let idle = ValueType {
        r#type: t.string("idle"),
        unit: t.string("nanoseconds"),
    };
    let dispatches = ValueType {
        r#type: t.string("dispatches_to_idle"),
        unit: t.string("count"),
    };
    // pprof names a profile after its first mapping: the program's own
    // module of the top path, where it has one.
    if let Some(f) = paths.iter().find_map(|p| p.program()) {
        if !f.module.is_empty() && f.frame.kind != FrameKind::Kernel {
            t.mapping(&f.module);
        }
    }
    let mut samples = Vec::with_capacity(paths.len());
    for p in paths {
        // A path without frames still shows in pprof's views, as one.
        let location_id = if p.frames.is_empty() {
            vec![t.location(&PathFrame {
                frame: crate::path::Frame::new(FrameKind::Unknown, "[no stack]"),
                source: crate::path::FrameSource::Kernel,
                runtime: true,
                module: String::new(),
            })]
        } else {
            p.frames.iter().map(|f| t.location(f)).collect()
        };
        let threads: Vec<String> = p.threads.iter().map(|th| p.process_threads(th)).collect();
        let mut label = vec![
            t.label("process", &p.process),
            t.label("thread", &threads.join(", ")),
            t.label("reason", p.reason.words()),
        ];
        if !p.object.is_empty() {
            label.push(t.label("object", &p.object));
        }
        samples.push(Sample {
            location_id,
            value: vec![
                i64::try_from(p.idle_ns).unwrap_or(i64::MAX),
                i64::try_from(p.dispatches).unwrap_or(i64::MAX),
            ],
            label,
        });
    }
    let comment = comments.iter().map(|c| t.string(c)).collect();
    let default_sample_type = idle.r#type;
    Profile {
        period_type: Some(idle),
        sample_type: vec![idle, dispatches],
        sample: samples,
        mapping: t.mappings,
        location: t.locations,
        function: t.functions,
        string_table: t.strings,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: i64::try_from(start).unwrap_or(i64::MAX),
        duration_nanos: i64::try_from(length).unwrap_or(i64::MAX),
        period: 1,
        comment,
        default_sample_type,
    }
}

/// Writes `profile` gzip-compressed, as pprof tools read it.
pub fn write_gz(profile: &Profile, out: impl Write) -> std::io::Result<()> {
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&profile.encode_to_vec())?;
    gz.finish()?.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::Frame;
    use crate::path::FrameSource;
    use crate::sections::idle_paths::PathThreads;

    fn frame(kind: FrameKind, name: &str, module: &str) -> PathFrame {
        PathFrame {
            frame: Frame::new(kind, name),
            source: FrameSource::Stack,
            runtime: false,
            module: module.into(),
        }
    }

    fn path(frames: Vec<PathFrame>, idle_ns: u64, dispatches: u64) -> IdlePath {
        IdlePath {
            process: "server".into(),
            reason: "futex wait".into(),
            object: String::new(),
            held_by: Vec::new(),
            notified_by: Vec::new(),
            idle_ns,
            share_pct: 0.0,
            dispatches,
            threads: vec![PathThreads {
                name: "worker-*".into(),
                count: 4,
                dispatches,
            }],
            frames,
            program_frame: None,
            jvm_internal: false,
            java_unnamed: false,
            java_stack_stops: false,
            windows: Default::default(),
        }
    }

    #[test]
    fn paths_become_samples_with_shared_locations_and_module_mappings() {
        let wait = frame(FrameKind::Kernel, "futex_wait", "");
        let lock = frame(FrameKind::Native, "pthread_mutex_lock", "/lib/libc.so.6");
        let a = frame(FrameKind::Native, "index_one", "/srv/server");
        let b = frame(FrameKind::Native, "flush", "/srv/server");
        let paths = [
            path(vec![wait.clone(), lock.clone(), a], 700, 7),
            path(vec![wait, lock, b], 300, 3),
        ];
        let p = profile_of(&paths, (1, 2), &["a comment".into()]);
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        assert_eq!(p.sample.len(), 2);
        assert_eq!(p.sample[0].value, [700, 7]);
        // Shared frames share a location: 4 distinct frames.
        assert_eq!(p.location.len(), 4);
        assert_eq!(p.sample[0].location_id[..2], p.sample[1].location_id[..2]);
        // Two modules, the kernel frame in none.
        assert_eq!(p.mapping.len(), 2);
        let first = &p.location[p.sample[0].location_id[0] as usize - 1];
        assert_eq!(first.mapping_id, 0);
        let f = &p.function[first.line[0].function_id as usize - 1];
        assert_eq!(s(f.name), "futex_wait [kernel]");
        let thread = p.sample[0]
            .label
            .iter()
            .find(|l| s(l.key) == "thread")
            .unwrap();
        assert_eq!(s(thread.str), "worker-* ×4");
        assert_eq!(s(p.default_sample_type), "idle");
    }
}
