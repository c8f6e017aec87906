//! The tracing glue at the top of a kernel call chain that a BPF program
//! took: the program itself (JIT code outside the kernel's text), the
//! tracepoint's BPF trampolines (`bpf_trace_runN`, `__bpf_trace_*`) and
//! its iterator (`__traceiter_*`). perf's sample of the same tracepoint
//! starts at the function that raised it (`__schedule`,
//! `try_to_wake_up`); [`KernelGlue::strip`] makes the program's chain start
//! there too, so that both sources give the same stacks.
//!
//! Invariant: only leading frames are removed, and only while they are
//! glue; without the kernel's symbols (kallsyms unreadable) nothing is.

use std::fs;
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

/// The address ranges of the glue, from `/proc/kallsyms`.
#[derive(Debug, Clone, Default)]
pub struct KernelGlue {
    /// `[start, end)` of each glue function, sorted and disjoint (one per
    /// tracepoint: thousands, so looked up by bisection).
    ranges: Vec<(u64, u64)>,
    /// The kernel's own text, `[_stext, _etext)`: a frame outside it at the
    /// top of the chain is the program.
    text: Option<(u64, u64)>,
}

/// Whether kernel symbol `name` is tracing glue.
fn is_glue(name: &str) -> bool {
    name.starts_with("bpf_trace_run")
        || name.starts_with("__bpf_trace_")
        || name.starts_with("__traceiter_")
}

/// [`KernelGlue::load`] on a thread of its own, waited for at its first
/// use: reading `/proc/kallsyms` takes 30-100 ms, which can go on while
/// the programs load.
#[derive(Debug)]
pub struct LoadingGlue {
    glue: OnceLock<KernelGlue>,
    loading: Mutex<Option<JoinHandle<KernelGlue>>>,
}

impl LoadingGlue {
    /// Starts reading the glue (read at the first use if no thread could
    /// be started).
    pub fn start() -> Self {
        let loading = std::thread::Builder::new()
            .name("idleflow-glue".into())
            .spawn(KernelGlue::load)
            .ok();
        LoadingGlue {
            glue: OnceLock::new(),
            loading: Mutex::new(loading),
        }
    }

    /// The glue, once read.
    pub fn get(&self) -> &KernelGlue {
        self.glue.get_or_init(|| {
            let loading = self.loading.lock().ok().and_then(|mut l| l.take());
            loading
                .and_then(|h| h.join().ok())
                .unwrap_or_else(KernelGlue::load)
        })
    }
}

impl KernelGlue {
    /// Reads the glue's ranges from `/proc/kallsyms` (empty if it cannot).
    pub fn load() -> Self {
        fs::read_to_string("/proc/kallsyms")
            .map(|s| Self::from_kallsyms(&s))
            .unwrap_or_default()
    }

    /// The glue of a `/proc/kallsyms` text.
    pub fn from_kallsyms(kallsyms: &str) -> Self {
        let mut addrs = Vec::new();
        let mut glue = Vec::new();
        let (mut stext, mut etext) = (0, 0);
        for line in kallsyms.lines() {
            let mut f = line.split_whitespace();
            let (Some(addr), Some(_kind), Some(name)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 {
                continue;
            }
            addrs.push(addr);
            match name {
                "_stext" => stext = addr,
                "_etext" => etext = addr,
                n if is_glue(n) => glue.push(addr),
                _ => {}
            }
        }
        addrs.sort_unstable();
        addrs.dedup();
        glue.sort_unstable();
        glue.dedup();
        let ranges = glue
            .into_iter()
            .map(|start| {
                let next = addrs.partition_point(|&a| a <= start);
                (start, addrs.get(next).copied().unwrap_or(start + 1))
            })
            .collect();
        KernelGlue {
            ranges,
            text: (stext != 0 && etext > stext).then_some((stext, etext)),
        }
    }

    /// `ips` (innermost first) without its leading glue.
    pub fn strip<'a>(&self, ips: &'a [u64]) -> &'a [u64] {
        let Some((stext, etext)) = self.text else {
            return ips;
        };
        let glue = |ip: u64| {
            if !(stext..etext).contains(&ip) {
                return true;
            }
            let i = self.ranges.partition_point(|&(s, _)| s <= ip);
            i > 0 && ip < self.ranges[i - 1].1
        };
        let skip = ips.iter().take_while(|&&ip| glue(ip)).count();
        &ips[skip..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff81100000 T __schedule
ffffffff81100800 T schedule
ffffffff81399a30 T __traceiter_sched_switch
ffffffff81399a90 T __traceiter_sched_waking
ffffffff8139dfc0 t __bpf_trace_sched_switch
ffffffff8139e000 t other
ffffffff814b86b0 T bpf_trace_run4
ffffffff814b8880 T bpf_trace_run5
ffffffff82000000 T _etext
";

    #[test]
    fn leading_glue_goes_and_nothing_after() {
        let g = KernelGlue::from_kallsyms(KALLSYMS);
        let chain = [
            0xffff_ffff_a000_1234, // the program (outside the text)
            0xffff_ffff_814b_86c0, // bpf_trace_run4
            0xffff_ffff_8139_dfd0, // __bpf_trace_sched_switch
            0xffff_ffff_8139_9a40, // __traceiter_sched_switch
            0xffff_ffff_8110_0100, // __schedule
            0xffff_ffff_8110_0810, // schedule
            0xffff_ffff_814b_86c0, // glue again, below: kept
        ];
        assert_eq!(g.strip(&chain), &chain[4..]);
        // `other` follows __bpf_trace_sched_switch: not glue.
        assert_eq!(g.strip(&[0xffff_ffff_8139_e010]), &[0xffff_ffff_8139_e010]);
        // Without kallsyms (zeros, or unreadable): nothing is stripped.
        let blind = KernelGlue::from_kallsyms("0000000000000000 T _stext\n");
        assert_eq!(blind.strip(&chain), &chain);
    }
}
