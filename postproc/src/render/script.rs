//! `idleflow script`: every record of a recording, one line each, in
//! stream order (like `perf script`), for checking and for scripts.

use std::io::{Read, Write};

use idleflow_format::{CutShort, FormatError, NodeTag, Reader, Record};

/// Errors of printing a recording.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The recording could not be read.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The output could not be written.
    #[error("writing the output")]
    Output(#[from] std::io::Error),
}

/// Prints every record of `input` to `out`, times in seconds since the
/// window start. A recording cut short is printed up to its last complete
/// record, and where it was cut is returned.
pub fn print(input: impl Read, out: &mut impl Write) -> Result<Option<CutShort>, ScriptError> {
    let mut r = Reader::new(input)?;
    r.keep_trees_encoded(true);
    let start = r.info().start_ns;
    while let Some(rec) = r.next_complete_record()? {
        print_record(out, &rec, start)?;
    }
    Ok(r.cut_short().cloned())
}

/// Seconds since `start` (negative before it).
fn rel_to(start: u64) -> impl Fn(u64) -> f64 {
    move |t: u64| (t as i128 - start as i128) as f64 / 1e9
}

/// One record's line: every kind of record is named here, in one of three
/// groups (the scheduler's, stacks and symbols, the JVMs').
fn print_record(out: &mut impl Write, rec: &Record, start: u64) -> std::io::Result<()> {
    match rec {
        Record::Dispatch(_)
        | Record::Wakeup(_)
        | Record::Thread(_)
        | Record::Exit(_)
        | Record::Lost(_) => print_scheduler(out, rec, start),
        Record::SwitchStack(_)
        | Record::SwitchUserStack(_)
        | Record::SwitchArg(_)
        | Record::SwitchJavaState(_)
        | Record::WakeStack(_)
        | Record::WakeUserStack(_)
        | Record::StackCopy(_)
        | Record::ModuleMap(_)
        | Record::UserStack(_)
        | Record::UserSymbols(_)
        | Record::SwitchJavaStack(_)
        | Record::WakeJavaStack(_)
        | Record::WalkedStack(_)
        | Record::KernelStack(_)
        | Record::KernelSymbols(_) => print_stacks(out, rec, start),
        Record::TreeHead(_)
        | Record::TreeThread(_)
        | Record::TreeThreadEncoded(_)
        | Record::JavaWait(_)
        | Record::JavaStack(_)
        | Record::JavaSymbol(_)
        | Record::JvmWaits(_) => print_java(out, rec, start),
    }
}

/// The scheduler's records: dispatches, wake-ups, threads, exits, losses.
fn print_scheduler(out: &mut impl Write, rec: &Record, start: u64) -> std::io::Result<()> {
    let rel = rel_to(start);
    match rec {
        Record::Dispatch(d) => writeln!(
            out,
            "{:14.9} cpu {:>3} dispatch {:>7} [{}] -> {:>7}{}",
            rel(d.time),
            d.cpu,
            d.prev_tid,
            d.prev_state.letter(),
            d.next_tid,
            match d.prev_node {
                NodeTag::Untraced => String::new(),
                NodeTag::Current(n) => format!("  node {n:#x} (current)"),
                NodeTag::Ring(n) => format!("  node {n:#x} (history)"),
                NodeTag::Unknown => "  node unknown".to_string(),
            }
        )?,
        Record::Wakeup(w) => writeln!(
            out,
            "{:14.9} cpu {:>3} wakeup   {:>7} wakes {:>7} on cpu {}{}{}",
            rel(w.time),
            w.cpu,
            w.waker_tid,
            w.wakee_tid,
            w.target_cpu,
            if w.new_thread { " (new)" } else { "" },
            if w.context.is_interrupt() {
                format!(
                    " (in {}: a device's, not {}'s)",
                    w.context.name(),
                    w.waker_tid
                )
            } else {
                String::new()
            }
        )?,
        Record::Thread(t) => writeln!(
            out,
            "{:14.9}         thread   {:>7} pid {} ppid {} comm {}",
            rel(t.time),
            t.tid,
            t.pid,
            t.ppid,
            t.comm
        )?,
        Record::Exit(e) => writeln!(
            out,
            "{:14.9}         exit     {:>7} pid {}",
            rel(e.time),
            e.tid,
            e.pid
        )?,
        Record::Lost(l) => writeln!(
            out,
            "{:14.9} cpu {:>3} LOST     {} records",
            rel(l.time),
            l.cpu,
            l.count
        )?,
        // The other kinds: print_record sends them elsewhere.
        _ => {}
    }
    Ok(())
}

/// Stacks and what names them: stacks at switches and wake-ups, stack
/// copies, module maps, unwound stacks, symbols.
fn print_stacks(out: &mut impl Write, rec: &Record, start: u64) -> std::io::Result<()> {
    let rel = rel_to(start);
    match rec {
            Record::SwitchStack(st) => writeln!(
                out,
                "{:14.9} cpu {:>3} kstack   {:>7} stack {}",
                rel(st.time),
                st.cpu,
                st.tid,
                st.stack
            )?,
            Record::SwitchUserStack(st) => writeln!(
                out,
                "{:14.9} cpu {:>3} ustack   {:>7} stack {}",
                rel(st.time),
                st.cpu,
                st.tid,
                st.stack
            )?,
            Record::SwitchArg(a) => writeln!(
                out,
                "{:14.9} cpu {:>3} arg      {:>7} {:#x}",
                rel(a.time),
                a.cpu,
                a.tid,
                a.arg
            )?,
            Record::SwitchJavaState(j) => writeln!(
                out,
                "{:14.9} cpu {:>3} jstate   {:>7} {:?}",
                rel(j.time),
                j.cpu,
                j.tid,
                j.state
            )?,
            Record::WakeStack(st) => writeln!(
                out,
                "{:14.9} cpu {:>3} wkstack  {:>7} stack {}",
                rel(st.time),
                st.cpu,
                st.tid,
                st.stack
            )?,
            Record::WakeUserStack(st) => writeln!(
                out,
                "{:14.9} cpu {:>3} wustack  {:>7} stack {}",
                rel(st.time),
                st.cpu,
                st.tid,
                st.stack
            )?,
            Record::StackCopy(c) => writeln!(
                out,
                "{:14.9} cpu {:>3} {} {:>7} pid {} ip {:#x} sp {:#x} bp {:#x}: {} of {} bytes",
                rel(c.time),
                c.cpu,
                if c.at_wakeup { "wucopy  " } else { "ucopy   " },
                c.tid,
                c.pid,
                c.ip,
                c.sp,
                c.bp,
                c.bytes.len(),
                c.requested
            )?,
            Record::ModuleMap(m) => writeln!(
                out,
                "{:14.9}         mmap     pid {} {:#x}-{:#x} @{:#x} {}{}",
                rel(m.time),
                m.pid,
                m.start,
                m.start.saturating_add(m.len),
                m.pgoff,
                m.path,
                if m.ino == 0 {
                    String::new()
                } else {
                    format!(" inode {}", m.ino)
                }
            )?,
            Record::SwitchJavaStack(st) => writeln!(
                out,
                "{:14.9} cpu {:>3} jstack   {:>7} walked {}",
                rel(st.time),
                st.cpu,
                st.tid,
                st.stack
            )?,
            Record::WakeJavaStack(st) => writeln!(
                out,
                "{:14.9} cpu {:>3} wjstack  {:>7} walked {}",
                rel(st.time),
                st.cpu,
                st.tid,
                st.stack
            )?,
            Record::WalkedStack(w) => writeln!(
                out,
                "                         walked   {} ({}): {}",
                w.id,
                if w.complete { "complete" } else { "cut short" },
                w.frames
                    .iter()
                    .map(|f| format!("{}:{}", f.method, f.line))
                    .collect::<Vec<_>>()
                    .join(" < ")
            )?,
            Record::UserStack(u) => writeln!(
                out,
                "                         ustack   {} = {:?}: frames {}",
                u.id,
                u.end,
                u.frames
                    .iter()
                    .map(|f| f.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            )?,
            Record::UserSymbols(u) => writeln!(
                out,
                "                         usyms    {} modules, {} frames ({} named); {} copies, {} unwound, {} truncated{}",
                u.modules.len(),
                u.frames.len(),
                u.frames.iter().filter(|f| !f.name.is_empty()).count(),
                u.counts.copies,
                u.counts.resolved,
                u.counts.truncated,
                u.notes
                    .iter()
                    .map(|n| format!("; {n}"))
                    .collect::<String>()
            )?,
            Record::KernelStack(k) => writeln!(
                out,
                "                         kstack   {} = {}",
                k.id,
                k.ips
                    .iter()
                    .map(|ip| format!("{ip:#x}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )?,
            Record::KernelSymbols(k) => writeln!(
                out,
                "                         ksyms    {} addresses named from {}{}",
                k.symbols.iter().filter(|s| !s.name.is_empty()).count(),
                k.source,
                k.notes
                    .iter()
                    .map(|n| format!("; {n}"))
                    .collect::<String>()
            )?,
        // The other kinds: print_record sends them elsewhere.
        _ => {}
    }
    Ok(())
}

/// The JVMs' records: call trees, Java waits and their stacks and symbols,
/// the flight recordings read.
fn print_java(out: &mut impl Write, rec: &Record, start: u64) -> std::io::Result<()> {
    let rel = rel_to(start);
    match rec {
            Record::TreeHead(t) => writeln!(
                out,
                "{:14.9}         tree     pid {} ({} snapshot): {} threads, {} methods",
                rel(t.time_ns),
                t.pid,
                if t.final_dump { "final" } else { "periodic" },
                t.threads,
                t.methods.len()
            )?,
            Record::TreeThread(t) => writeln!(
                out,
                "                         tree     pid {} tid {:>7} {}: {} nodes",
                t.pid,
                t.tid,
                t.name,
                t.nodes.len()
            )?,
            Record::TreeThreadEncoded(t) => writeln!(
                out,
                "                         tree     pid {} tid {:>7} {}: {} nodes",
                t.pid, t.tid, t.name, t.node_count
            )?,
            Record::JavaWait(w) => writeln!(
                out,
                "{:14.9}         java     {:>7} pid {} {} for {:.3} ms, stack {}, object {}, other {} ({})",
                rel(w.start),
                w.tid,
                w.pid,
                w.reason.words(),
                w.duration as f64 / 1e6,
                w.stack,
                w.object,
                w.other_tid,
                w.other
            )?,
            Record::JavaStack(s) => writeln!(
                out,
                "                         stack    pid {} id {}: {}{}",
                s.pid,
                s.id,
                s.frames
                    .iter()
                    .map(|f| format!("{}:{}[{}]", f.method, f.line, f.kind.name()))
                    .collect::<Vec<_>>()
                    .join(" <- "),
                if s.truncated { " (truncated)" } else { "" }
            )?,
            Record::JavaSymbol(s) => writeln!(
                out,
                "                         symbol   pid {} id {}: {}",
                s.pid, s.id, s.text
            )?,
            Record::JvmWaits(j) => writeln!(
                out,
                "                         jvm      pid {}: {} waits of {} events from {} ({} bytes, {} chunks), clock offset {} ns{}",
                j.pid,
                j.waits,
                j.events,
                j.file,
                j.file_bytes,
                j.chunks,
                j.clock_offset_ns,
                j.notes
                    .iter()
                    .map(|n| format!("; {n}"))
                    .collect::<String>()
            )?,
        // The other kinds: print_record sends them elsewhere.
        _ => {}
    }
    Ok(())
}
