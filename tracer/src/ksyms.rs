//! Names the kernel addresses of the recorded stacks, once, when the
//! recording ends (never while the program runs), with `blazesym`'s kernel
//! source: `/proc/kallsyms` of the running kernel, whose addresses already
//! include the KASLR offset. The names go into the recording
//! ([`idleflow_format::KernelSymbols`]), so it reports the same elsewhere.
//!
//! Invariant: one symbol per distinct address asked for, in the order
//! asked; an address that cannot be named gets an empty name, and a
//! failure of the whole lookup is a note, never an error of the recording.

use blazesym::symbolize::source::{Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::MaybeDefault;
use idleflow_format::{KernelSymbol, KernelSymbols};

/// Where the names come from.
const KALLSYMS: &str = "/proc/kallsyms";

/// The names of `addrs` (distinct kernel addresses).
pub fn name(addrs: &[u64]) -> KernelSymbols {
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
    let symbolizer = Symbolizer::new();
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
