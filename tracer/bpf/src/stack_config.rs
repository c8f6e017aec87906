//! [`StackConfig`]: which stacks the programs take, as the loader freezes
//! it into them and the rings size their buffers for it.
//!
//! Invariant: the longest record the programs can write with a config is
//! [`StackConfig::max_record`]; nothing else decides a record's size.

use crate::record::{RECORD_BYTES, STACK_HEAD_BYTES};

/// The stacks the programs take (the default: none). Each is what perf's
/// sample of the same event would carry: the kernel call chain (up to
/// [`crate::record::KERNEL_FRAMES`] frames), the user registers and a copy
/// of the top of the user stack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackConfig {
    /// At the switches that leave a CPU idle, the leaving thread's kernel
    /// call chain.
    pub idle_kernel: bool,
    /// And this many bytes of its user stack (a multiple of 8; 0: none;
    /// only with `idle_kernel`).
    pub idle_user_bytes: u32,
    /// About this many of those switches a second per CPU get their
    /// stacks, each with the same chance; 0: every one.
    pub idle_budget: u32,
    /// One waking in this many (at random) gets stacks; 0: none.
    pub waker_one_in: u32,
    /// At most about this many of those a second per CPU, each waking
    /// with the same chance when they come faster; 0: no budget.
    pub waker_budget: u32,
    /// The waker's kernel call chain (an interrupt's, if one raised it).
    pub waker_kernel: bool,
    /// And this many bytes of a thread waker's user stack (0: none).
    pub waker_user_bytes: u32,
}

impl StackConfig {
    /// The longest record the programs write with these stacks.
    pub fn max_record(&self) -> usize {
        let user = match (self.idle_kernel, self.waker_one_in) {
            (false, 0) => return RECORD_BYTES,
            (true, 0) => self.idle_user_bytes,
            (false, _) => self.waker_user_bytes,
            (true, _) => self.idle_user_bytes.max(self.waker_user_bytes),
        };
        STACK_HEAD_BYTES + (user & !7) as usize
    }
}
