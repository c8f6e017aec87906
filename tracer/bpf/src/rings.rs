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
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use libbpf_rs::libbpf_sys;
use libbpf_rs::{ErrorKind, MapCore, MapFlags, MapHandle, MapType, RingBuffer, RingBufferBuilder};

use crate::error::BpfError;
use crate::record::{decode, SchedEvent, RECORD_BYTES};

/// Bytes a record of `len` bytes takes in an inbox: a `u32` length, the
/// record, padding to 8 ([`records`]).
pub fn framed_len(len: usize) -> usize {
    (4 + len).next_multiple_of(8)
}

/// The records of an inbox's bytes (a drained chunk), in order: each is
/// framed by its `u32` length and padded to 8 bytes. A frame that does not
/// fit ends the walk (the inbox writes none).
pub fn records(chunk: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let len = u32::from_ne_bytes(chunk.get(at..at + 4)?.try_into().ok()?) as usize;
        let record = chunk.get(at + 4..at + 4 + len)?;
        at += framed_len(len);
        Some(record)
    })
}

/// Appends `record` to `buf`, framed as [`records`] reads it.
fn push_framed(buf: &mut Vec<u8>, record: &[u8]) {
    let end = buf.len() + framed_len(record.len());
    buf.extend_from_slice(&(record.len() as u32).to_ne_bytes());
    buf.extend_from_slice(record);
    buf.resize(end, 0);
}

/// What the ring callbacks moved out of the kernel's rings and not yet
/// handed on: each ring's records, back to back, framed ([`records`]).
/// A buffer holds at most its ring's size; a callback that finds it full
/// leaves the record in the kernel's ring for the next read.
#[derive(Debug, Default)]
struct Inbox {
    rings: Vec<Vec<u8>>,
}

/// The rings and their reader.
pub(crate) struct Rings {
    // Dropped first: it maps the rings and holds the callbacks.
    reader: RingBuffer<'static>,
    inbox: Rc<RefCell<Inbox>>,
    cpus: Vec<u32>,
    /// The room the longest record the programs write takes in an inbox.
    max_frame: usize,
    /// Records taken off a ring and not handed on: shorter than
    /// [`RECORD_BYTES`] or longer than the longest the programs write, or
    /// that did not decode (or, which `fill` rules out, with no room for
    /// them).
    undecodable: Arc<AtomicU64>,
    /// Readable once per wake-up of a ring (edge-triggered), for a waiter
    /// that must not spin while records keep coming (see [`RingDrain`]).
    edge: OwnedFd,
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
    /// `outer`; the programs' records are at most `max_record` bytes.
    pub fn create(
        outer: &dyn MapCore,
        cpus: &[u32],
        bytes: u32,
        max_record: usize,
    ) -> Result<Self, BpfError> {
        let max_record = max_record.max(RECORD_BYTES);
        let max_frame = framed_len(max_record);
        let opts = libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        };
        let inbox = Rc::new(RefCell::new(Inbox {
            rings: cpus
                .iter()
                .map(|_| Vec::with_capacity((bytes as usize).max(2 * max_frame)))
                .collect(),
        }));
        let undecodable = Arc::new(AtomicU64::new(0));
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
        for (i, (&cpu, map)) in cpus.iter().zip(&maps).enumerate() {
            let inbox = Rc::clone(&inbox);
            let undecodable = Arc::clone(&undecodable);
            builder
                .add(map, move |data: &[u8]| {
                    if data.len() < RECORD_BYTES || data.len() > max_record {
                        undecodable.fetch_add(1, Ordering::Relaxed);
                        return 0;
                    }
                    let mut inbox = inbox.borrow_mut();
                    let Some(buf) = inbox.rings.get_mut(i) else {
                        return 0;
                    };
                    // Never grow: the drain thread must not allocate. `fill`
                    // reads no more than the room left, so this is a guard:
                    // libbpf has already taken the record off the ring.
                    if buf.capacity() - buf.len() < framed_len(data.len()) {
                        undecodable.fetch_add(1, Ordering::Relaxed);
                        return 0;
                    }
                    push_framed(buf, data);
                    0
                })
                .map_err(|e| BpfError::kernel(format!("reading the ring of CPU {cpu}"), e))?;
        }
        let reader = builder
            .build()
            .map_err(|e| BpfError::kernel("mapping the rings", e))?;
        let edge = edge_epoll(&maps)?;
        Ok(Rings {
            reader,
            inbox,
            cpus: cpus.to_vec(),
            max_frame,
            undecodable,
            edge,
            _maps: maps,
        })
    }

    /// Moves what the kernel's rings hold into the buffers, as much as they
    /// take: each time at most as many records as the emptiest buffer has
    /// room for at the longest record (libbpf counts across the rings), so
    /// no callback ever finds its buffer full; again while that many came.
    /// The rest waits in the kernel's rings.
    fn fill(&mut self) -> Result<(), BpfError> {
        loop {
            let room = self
                .inbox
                .borrow()
                .rings
                .iter()
                .map(|b| (b.capacity() - b.len()) / self.max_frame)
                .min()
                .unwrap_or(0);
            if room == 0 {
                return Ok(());
            }
            let rc = self.reader.consume_raw_n(room);
            if rc < 0 {
                return Err(BpfError::kernel(
                    "reading the rings",
                    std::io::Error::from_raw_os_error(-rc),
                ));
            }
            if (rc as usize) < room {
                return Ok(());
            }
        }
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
        self.fill()?;
        let mut n = 0;
        let mut inbox = self.inbox.borrow_mut();
        for (buf, &cpu) in inbox.rings.iter_mut().zip(&self.cpus) {
            for record in records(buf) {
                match decode(record) {
                    Ok(event) => {
                        f(cpu, event);
                        n += 1;
                    }
                    Err(_) => {
                        self.undecodable.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            buf.clear();
        }
        Ok(n)
    }

    /// The count of records taken off a ring and not handed on.
    pub fn undecodable(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.undecodable)
    }

    /// A descriptor that polls readable when a ring passed the wake-up
    /// threshold (libbpf's epoll descriptor: readable while a woken ring
    /// holds records).
    pub fn wait_fd(&self) -> RawFd {
        self.reader.epoll_fd()
    }
}

/// An epoll descriptor watching `maps` edge-triggered: a ring's wake-up
/// makes it readable until [`RingDrain::rearm`] takes it, however many
/// records come meanwhile (libbpf's own descriptor is level-triggered: it
/// stays readable while a ring holds any record, and a waiter woken by it
/// would spin on a busy machine).
fn edge_epoll(maps: &[MapHandle]) -> Result<OwnedFd, BpfError> {
    let io = |what: &str| BpfError::kernel(what.to_string(), std::io::Error::last_os_error());
    // SAFETY: epoll_create1 has no memory effects; a valid descriptor is
    // owned by the OwnedFd at once.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(io("creating the rings' epoll descriptor"));
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let edge = unsafe { OwnedFd::from_raw_fd(fd) };
    for (i, map) in maps.iter().enumerate() {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLET) as u32,
            u64: i as u64,
        };
        // SAFETY: both descriptors are open; `ev` is a valid epoll_event.
        let rc = unsafe {
            libc::epoll_ctl(
                edge.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                map.as_fd().as_raw_fd(),
                &mut ev,
            )
        };
        if rc < 0 {
            return Err(io("watching a ring"));
        }
    }
    Ok(edge)
}

/// The rings handed to a thread that only moves bytes (idleflow's drain):
/// it waits on [`RingDrain::wait_fd`], takes the wake-up with
/// [`RingDrain::rearm`], and moves each ring's records out with
/// [`RingDrain::drain`] — without allocating, so that a real-time thread
/// can do it. The records are decoded later with [`crate::decode`].
///
/// Invariant: a ring's records are handed on in its order, each exactly
/// once; records the taker cannot place stay in the buffer (and, once that
/// is full, in the kernel's ring, which counts what it then drops).
#[derive(Debug)]
pub struct RingDrain {
    rings: Rings,
}

impl RingDrain {
    pub(crate) fn new(rings: Rings) -> Self {
        RingDrain { rings }
    }

    /// The CPU of each ring, in ring order.
    pub fn cpus(&self) -> &[u32] {
        &self.rings.cpus
    }

    /// Readable once after a ring passed its wake-up threshold
    /// (edge-triggered: it stays readable until [`RingDrain::rearm`]).
    pub fn wait_fd(&self) -> RawFd {
        self.rings.edge.as_raw_fd()
    }

    /// Takes the pending wake-ups, so that the next wait sleeps until the
    /// next one.
    pub fn rearm(&mut self) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 8];
        loop {
            // SAFETY: `events` is a valid array of its length; timeout 0.
            let n = unsafe {
                libc::epoll_wait(
                    self.rings.edge.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as i32,
                    0,
                )
            };
            if n < events.len() as i32 {
                return;
            }
        }
    }

    /// Moves every ring's records out: `place(ring, bytes)` for each ring
    /// holding some (whole records, framed: [`records`], in order), which
    /// returns whether it took them; bytes not taken are offered again at
    /// the next call.
    pub fn drain(&mut self, place: &mut dyn FnMut(usize, &[u8]) -> bool) -> Result<(), BpfError> {
        self.rings.fill()?;
        let mut inbox = self.rings.inbox.borrow_mut();
        for (i, buf) in inbox.rings.iter_mut().enumerate() {
            if !buf.is_empty() && place(i, buf) {
                buf.clear();
            }
        }
        Ok(())
    }
}
