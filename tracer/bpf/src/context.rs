//! Where a wake-up was raised — a thread's code, a softirq, a hard
//! interrupt or an NMI — from the CPU's preempt count, which the BPF
//! program reads at the waking (see `read_preempt_count` in
//! `src/bpf/sched.bpf.c` for how it reaches it).
//!
//! The kernel's tracepoints decide the same from the same word
//! (`tracing_gen_ctx_irq_test`): NMI if the NMI count is not zero, else a
//! hard interrupt if the hardirq count is not zero, else a softirq if one
//! is being served (`SOFTIRQ_OFFSET`; a thread that only disabled bottom
//! halves is still a thread). So a BPF record and a perf sample of the same
//! waking name the same [`WakeContext`].
//!
//! Invariant: the program stores `preempt_count >> 8` as 16 bits: the
//! softirq count in bits 0–7, the hardirq count in 8–11, the NMI count in
//! 12–15 (`include/linux/preempt.h`: 8 preempt, 8 softirq, 4 hardirq,
//! 4 NMI bits).

use idleflow_format::WakeContext;

/// `SOFTIRQ_OFFSET >> 8`: a softirq is being served.
const SERVING_SOFTIRQ: u16 = 0x0001;
/// `HARDIRQ_MASK >> 8`.
const HARDIRQ: u16 = 0x0f00;
/// `NMI_MASK >> 8`.
const NMI: u16 = 0xf000;

/// The context named by the preempt count's upper bits `pc_high`
/// (`preempt_count >> 8`).
pub fn wake_context(pc_high: u16) -> WakeContext {
    if pc_high & NMI != 0 {
        WakeContext::Nmi
    } else if pc_high & HARDIRQ != 0 {
        WakeContext::HardIrq
    } else if pc_high & SERVING_SOFTIRQ != 0 {
        WakeContext::SoftIrq
    } else {
        WakeContext::Task
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preempt_count_names_the_context_as_the_tracepoints_do() {
        // preempt_count values (x86-64, PREEMPT_NEED_RESCHED left out).
        let cases = [
            (0x0000_0001, WakeContext::Task),    // preemption disabled
            (0x0000_0201, WakeContext::Task),    // bottom halves disabled
            (0x0000_0101, WakeContext::SoftIrq), // serving a softirq
            (0x0001_0000, WakeContext::HardIrq),
            (0x0001_0101, WakeContext::HardIrq), // hard irq over a softirq
            (0x0011_0000, WakeContext::Nmi),     // nmi_enter adds both
        ];
        for (pc, expected) in cases {
            assert_eq!(wake_context((pc >> 8) as u16), expected, "{pc:#x}");
        }
    }
}
