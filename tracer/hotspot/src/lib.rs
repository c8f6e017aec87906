//! idleflow's reader of a running HotSpot JVM, from outside: what the JVM
//! exports for its serviceability agent (the `gHotSpotVM*` introspection
//! tables of libjvm.so: [`vmstructs`]), turned into the offsets idleflow
//! uses ([`layout`]), and what those offsets find in the process's memory
//! ([`threads`]), read through `/proc/PID/mem` ([`memory`]). No attach, no
//! agent, no JVM flag, no ptrace stop: the JVM runs on, unaware.
//!
//! What it assumes of the JVM: a HotSpot libjvm.so (OpenJDK and its
//! builds: Debian's, Temurin) that exports the introspection tables, on
//! x86-64. What it does not: any offset or size of a JDK version — those
//! are all read from the tables (docs/JAVA.md lists the versions tested).
//!
//! Invariant: the target's memory is untrusted input; every read is
//! bounded and every failure is a typed error, never a panic.

pub mod blocked;
pub mod fields;
pub mod frames;
pub mod layout;
pub mod memory;
pub mod monitors;
pub mod names;
pub mod scopes;
pub mod threads;
pub mod vmstructs;

use std::path::PathBuf;

pub use blocked::{BlockedThreads, Found};
pub use frames::{CodeCache, FrameKind, JavaFrame, Walk, WalkEnd, Walker};
pub use layout::{Layout, MissingNames};
pub use memory::{Memory, MemoryError, ProcessMemory};
pub use monitors::MonitorLayout;
pub use names::{MethodName, Names};
pub use threads::{Anchor, JavaThread};
pub use vmstructs::{LibjvmMapping, VmStructs, VmStructsError};

/// Why a JVM could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HotspotError {
    /// `/proc/PID/maps` could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    Maps {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The tables could not be read.
    #[error(transparent)]
    Tables(#[from] VmStructsError),
    /// The tables lack names idleflow needs (a JDK it does not know).
    #[error(transparent)]
    Layout(#[from] MissingNames),
    /// The process's memory could not be read.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// `IDLEFLOW_HOTSPOT_REFUSE=1` said to treat it as unreadable.
    #[error("its structures are not read: {}=1", blocked::REFUSE_ENV)]
    Refused,
}

/// A running HotSpot JVM, its tables read.
#[derive(Debug)]
pub struct Jvm {
    mem: ProcessMemory,
    /// Where its libjvm.so is.
    pub libjvm: LibjvmMapping,
    /// Its introspection tables.
    pub vm: VmStructs,
    /// The offsets idleflow uses.
    pub layout: Layout,
    /// Where its threads' monitors are (`None`: its tables lack a name
    /// that needs; its frames are read all the same).
    pub monitors: Option<MonitorLayout>,
    /// Where classes keep their fields (`None`: its tables lack a name
    /// that needs).
    pub fields: Option<fields::FieldLayout>,
    /// Its release (`17.0.15+6-Debian-1deb12u1`, …).
    pub release: String,
    states: Vec<(u32, String)>,
}

impl Jvm {
    /// Reads the tables of the JVM `pid`.
    pub fn open(pid: u32) -> Result<Self, HotspotError> {
        let path = PathBuf::from(format!("/proc/{pid}/maps"));
        let maps = std::fs::read_to_string(&path).map_err(|source| HotspotError::Maps {
            path: path.clone(),
            source,
        })?;
        let libjvm = vmstructs::find_libjvm(pid, &maps).ok_or(VmStructsError::NoLibjvm(pid))?;
        let symbols = vmstructs::LibjvmSymbols::read(&libjvm)?;
        let mem = ProcessMemory::open(pid)?;
        let vm = VmStructs::read(&mem, &symbols, libjvm.base)?;
        let mut layout = Layout::new(&vm)?;
        let release = mem.c_string(mem.u64(layout.vm_release)?)?;
        let major = mem.u32(layout.vm_major)?;
        let security = mem.u32(layout.vm_security)?;
        layout.methods.unsigned5_excluded = u8::from((major, security) >= (20, 15));
        let states = threads::state_names(&vm);
        let monitors = MonitorLayout::new(&vm);
        let fields = fields::FieldLayout::new(&vm);
        Ok(Self {
            mem,
            libjvm,
            vm,
            layout,
            monitors,
            fields,
            release,
            states,
        })
    }

    /// The process.
    pub fn pid(&self) -> u32 {
        self.mem.pid()
    }

    /// Its memory.
    pub fn memory(&self) -> &ProcessMemory {
        &self.mem
    }

    /// The names of its thread states (`_thread_blocked`, …) by value.
    pub fn states(&self) -> &[(u32, String)] {
        &self.states
    }

    /// Where its code is (read anew: cheap, and fixed once the JVM runs).
    pub fn code_cache(&self) -> Result<CodeCache, MemoryError> {
        CodeCache::read(&self.mem, &self.layout.code)
    }

    /// The Java frames from `anchor`, innermost first.
    pub fn walk(&self, code: &CodeCache, anchor: Anchor) -> Walk {
        frames::walk(&self.mem, &self.layout, code, anchor)
    }

    /// The source line of `bci` in the method at `method` (`None`: no
    /// line number table, or it could not be read).
    pub fn line(&self, method: u64, bci: u32) -> Option<u32> {
        names::line(&self.mem, &self.layout.methods, method, bci)
    }

    /// A walker that remembers what it learns of this JVM's code (for
    /// many walks: see [`Walker`]).
    pub fn walker(&self) -> Result<Walker, MemoryError> {
        Ok(Walker::new(self.code_cache()?))
    }

    /// The Java frames from `anchor`, with `walker`'s memory.
    pub fn walk_with(&self, walker: &mut Walker, anchor: Anchor) -> Walk {
        walker.walk(&self.mem, &self.layout, anchor)
    }

    /// The names of the method at `method`, with `names`' memory.
    pub fn method_name_with<'a>(
        &self,
        names: &'a mut Names,
        method: u64,
    ) -> Option<&'a MethodName> {
        names.get(&self.mem, &self.layout.methods, method)
    }

    /// The names of the method at `method`.
    pub fn method_name(&self, method: u64) -> Result<MethodName, MemoryError> {
        names::method_name(&self.mem, &self.layout.methods, method)
    }

    /// Its Java thread `tid`, now (`None`: not a Java thread, or gone).
    pub fn thread(&self, tid: u32) -> Result<Option<JavaThread>, MemoryError> {
        Ok(self.threads()?.into_iter().find(|t| t.tid == tid))
    }

    /// Its Java threads, now.
    pub fn threads(&self) -> Result<Vec<JavaThread>, MemoryError> {
        threads::java_threads(&self.mem, &self.layout.threads, &self.states)
    }
}
