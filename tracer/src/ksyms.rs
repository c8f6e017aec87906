//! Names the kernel addresses of the recorded stacks, once, when the
//! recording ends (never while the program runs), with `blazesym`'s kernel
//! source: `/proc/kallsyms` of the running kernel, whose addresses already
//! include the KASLR offset. The names go into the recording
//! ([`idleflow_format::KernelSymbols`]), so it reports the same elsewhere.
//!
//! A flight recorder names the stacks of every dump: its [`KernelNamer`]
//! keeps `/proc/kallsyms` read for the recorder's life (reading it again
//! took 100–180 ms of a 60-s dump's write on a loaded machine), and reads
//! it again when `/proc/modules` changed.
//!
//! Invariant: one symbol per distinct address asked for, in the order
//! asked; an address that cannot be named gets an empty name, and a
//! failure of the whole lookup is a note, never an error of the recording.

use std::sync::mpsc;

use blazesym::symbolize::source::{Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::MaybeDefault;
use idleflow_format::{KernelSymbol, KernelSymbols};

/// Where the names come from.
const KALLSYMS: &str = "/proc/kallsyms";

/// The names of `addrs` (distinct kernel addresses).
pub fn name(addrs: &[u64]) -> KernelSymbols {
    name_with(&Symbolizer::new(), addrs)
}

/// A request to the namer's thread: addresses, and where the names go.
type Ask = (Vec<u64>, mpsc::Sender<KernelSymbols>);

/// Names kernel addresses with `/proc/kallsyms` read once, on a thread of
/// its own (blazesym's symbolizer, which keeps what it read, stays on one
/// thread). Clones share the thread; it ends with the last clone.
#[derive(Debug, Clone)]
pub struct KernelNamer {
    ask: mpsc::Sender<Ask>,
}

impl KernelNamer {
    /// Starts the thread, which reads `/proc/kallsyms` at once (so the
    /// first dump does not wait for it).
    pub fn start() -> std::io::Result<KernelNamer> {
        let (ask, asked) = mpsc::channel::<Ask>();
        std::thread::Builder::new()
            .name("idleflow-ksyms".into())
            .spawn(move || {
                let mut cached = Cached::new();
                let _ = name_with(&cached.symbolizer, &[WARM_UP]);
                for (addrs, reply) in asked {
                    if cached.modules != modules() {
                        cached = Cached::new();
                    }
                    let _ = reply.send(name_with(&cached.symbolizer, &addrs));
                }
            })?;
        Ok(KernelNamer { ask })
    }

    /// The names of `addrs`, as [`name`] gives them.
    pub fn name(&self, addrs: &[u64]) -> KernelSymbols {
        let (reply, names) = mpsc::channel();
        if self.ask.send((addrs.to_vec(), reply)).is_ok() {
            if let Ok(symbols) = names.recv() {
                return symbols;
            }
        }
        // The thread is gone (it panicked): read the names the slow way.
        name(addrs)
    }
}

/// An address to name at start, so that the symbolizer reads the file;
/// whether it has a name does not matter.
const WARM_UP: u64 = 0xffff_ffff_8100_0000;

/// A symbolizer that read `/proc/kallsyms` when `/proc/modules` was
/// `modules`.
struct Cached {
    symbolizer: Symbolizer,
    modules: Vec<u8>,
}

impl Cached {
    fn new() -> Cached {
        Cached {
            symbolizer: Symbolizer::new(),
            modules: modules(),
        }
    }
}

/// The loaded modules: kallsyms changes with them.
fn modules() -> Vec<u8> {
    std::fs::read("/proc/modules").unwrap_or_default()
}

fn name_with(symbolizer: &Symbolizer, addrs: &[u64]) -> KernelSymbols {
    let mut out = KernelSymbols {
        source: KALLSYMS.into(),
        ..Default::default()
    };
    if addrs.is_empty() {
        return out;
    }
    let src = Source::Kernel(Kernel {
        kallsyms: MaybeDefault::Some(KALLSYMS.into()),
        vmlinux: MaybeDefault::None,
        ..Default::default()
    });
    match symbolizer.symbolize(&src, Input::AbsAddr(addrs)) {
        Ok(found) => {
            out.symbols = addrs
                .iter()
                .zip(found)
                .map(|(&addr, s)| match s {
                    Symbolized::Sym(sym) => KernelSymbol {
                        addr,
                        name: sym.name.into_owned(),
                        offset: sym.offset as u64,
                    },
                    Symbolized::Unknown(_) => KernelSymbol {
                        addr,
                        name: String::new(),
                        offset: 0,
                    },
                })
                .collect();
            // kallsyms reads as all zeros without the privilege to see it.
            if out.symbols.iter().all(|s| s.name.is_empty()) {
                out.notes.push(format!(
                    "no kernel address could be named from {KALLSYMS} \
                     (kptr_restrict, or not root?)"
                ));
            }
        }
        Err(e) => out
            .notes
            .push(format!("kernel addresses not named ({KALLSYMS}): {e}")),
    }
    out
}
