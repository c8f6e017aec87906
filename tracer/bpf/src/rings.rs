//! The BPF ring buffers, one per recorded CPU, and their reader.
//!
//! Each CPU's program writes into its own ring (the outer map `rings`
//! holds the CPU's ring at the CPU's index), so CPUs never contend for a
//! ring's lock. The reader is libbpf's `ring_buffer` over all of them: a
//! wait on one epoll descriptor, woken when some ring passed the programs'
//! wake-up threshold, then a read of every ring (the programs submit
//! without waking below the threshold, so a wait that times out still has
//! records to read).
//!
//! Invariant: records are decoded and handed on in each ring's order (the
//! order its CPU reserved them), tagged with the ring's CPU; records that
//! do not decode are counted ([`Rings::undecodable`]), never passed on.

use std::cell::RefCell;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::rc::Rc;
use std::time::Duration;

use libbpf_rs::libbpf_sys;
use libbpf_rs::{ErrorKind, MapCore, MapFlags, MapHandle, MapType, RingBuffer, RingBufferBuilder};

use crate::error::BpfError;
use crate::record::{decode, SchedEvent};

/// What the ring callbacks decoded, waiting for [`Rings::read`].
#[derive(Debug, Default)]
struct Inbox {
    events: Vec<(u32, SchedEvent)>,
    undecodable: u64,
}

/// The rings and their reader.
pub(crate) struct Rings {
    // Dropped first: it maps the rings and holds the callbacks.
    reader: RingBuffer<'static>,
    inbox: Rc<RefCell<Inbox>>,
    _maps: Vec<MapHandle>,
}

// SAFETY: `Rings` is not `Send` by default for two reasons, neither of
// which matters when the whole value moves to another thread: libbpf's
// `ring_buffer` (a plain heap object with an epoll descriptor and mappings,
// no thread affinity), and the `Rc` shared between `inbox` and the
// callbacks inside `reader`. Every clone of that `Rc` lives inside this
// value and none is ever handed out, so all of them move together and are
// only touched by the thread that owns the value (`&mut self` methods).
unsafe impl Send for Rings {}

impl std::fmt::Debug for Rings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rings")
            .field("rings", &self._maps.len())
            .finish_non_exhaustive()
    }
}

impl Rings {
    /// Creates a ring of `bytes` (a power of two, a multiple of the page
    /// size) for each CPU of `cpus` and puts it at the CPU's index of
    /// `outer`.
    pub fn create(outer: &dyn MapCore, cpus: &[u32], bytes: u32) -> Result<Self, BpfError> {
        let opts = libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        };
        let inbox = Rc::new(RefCell::new(Inbox::default()));
        let mut maps = Vec::with_capacity(cpus.len());
        for &cpu in cpus {
            let ring = MapHandle::create(
                MapType::RingBuf,
                Some(format!("idleflow_rb{cpu}")),
                0,
                0,
                bytes,
                &opts,
            )
            .map_err(|e| {
                BpfError::kernel(format!("creating the {bytes}-byte ring of CPU {cpu}"), e)
            })?;
            let fd = ring.as_fd().as_raw_fd() as u32;
            outer
                .update(&cpu.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| BpfError::kernel(format!("installing the ring of CPU {cpu}"), e))?;
            maps.push(ring);
        }
        let mut builder = RingBufferBuilder::new();
        for (&cpu, map) in cpus.iter().zip(&maps) {
            let inbox = Rc::clone(&inbox);
            builder
                .add(map, move |data: &[u8]| {
                    let mut inbox = inbox.borrow_mut();
                    match decode(data) {
                        Ok(event) => inbox.events.push((cpu, event)),
                        Err(_) => inbox.undecodable += 1,
                    }
                    0
                })
                .map_err(|e| BpfError::kernel(format!("reading the ring of CPU {cpu}"), e))?;
        }
        let reader = builder
            .build()
            .map_err(|e| BpfError::kernel("mapping the rings", e))?;
        Ok(Rings {
            reader,
            inbox,
            _maps: maps,
        })
    }

    /// Waits up to `timeout` for a ring to pass the wake-up threshold, then
    /// reads every ring, calling `f(cpu, event)` for each record; returns
    /// how many it passed on.
    pub fn read(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(u32, SchedEvent),
    ) -> Result<usize, BpfError> {
        match self.reader.poll(timeout) {
            Err(e) if e.kind() != ErrorKind::Interrupted => {
                return Err(BpfError::kernel("waiting for the rings", e))
            }
            _ => {}
        }
        self.reader
            .consume()
            .map_err(|e| BpfError::kernel("reading the rings", e))?;
        let mut events = std::mem::take(&mut self.inbox.borrow_mut().events);
        let n = events.len();
        for (cpu, event) in events.drain(..) {
            f(cpu, event);
        }
        // Keep the allocation for the next read.
        self.inbox.borrow_mut().events = events;
        Ok(n)
    }

    /// Records read that did not decode.
    pub fn undecodable(&self) -> u64 {
        self.inbox.borrow().undecodable
    }

    /// A descriptor that polls readable when a ring passed the wake-up
    /// threshold (libbpf's epoll descriptor).
    pub fn wait_fd(&self) -> RawFd {
        self.reader.epoll_fd()
    }
}
