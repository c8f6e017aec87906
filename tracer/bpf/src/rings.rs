//! The BPF ring buffers, one per recorded CPU, and their reader.
//!
//! Each CPU's program writes into its own ring (the outer map `rings`
//! holds the CPU's ring at the CPU's index), so CPUs never contend for a
//! ring's lock. Each ring is mapped here ([`RingMap`]) and read a run of
//! records at a time: the drain copies a run straight into its staging
//! memory (one copy; libbpf's reader called back once per record, which
//! then had to be copied twice). A wait is on an epoll descriptor over all
//! rings, woken when some ring passed the programs' wake-up threshold (the
//! programs submit without waking below it, so a wait that times out still
//! has records to read).
//!
//! Invariant: records are decoded and handed on in each ring's order (the
//! order its CPU reserved them), tagged with the ring's CPU; a ring's
//! bytes are given back to the kernel only once taken; records that do not
//! decode are counted ([`Rings::undecodable`]), never passed on.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

use crate::error::BpfError;
use crate::flush::Flusher;
use crate::record::decode;
use crate::ringmap::{records, RingMap};

/// The rings and their reader.
pub(crate) struct Rings {
    // Dropped before the maps' descriptors.
    rings: Vec<RingMap>,
    cpus: Vec<u32>,
    /// Records taken off a ring and not handed on: that did not decode.
    undecodable: Arc<AtomicU64>,
    /// Readable while a woken ring holds records (level-triggered), for
    /// [`Rings::read`]'s wait.
    level: OwnedFd,
    /// Readable once per wake-up of a ring (edge-triggered), for a waiter
    /// that must not spin while records keep coming (see [`RingDrain`]).
    edge: OwnedFd,
    _maps: Vec<MapHandle>,
}

impl std::fmt::Debug for Rings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rings")
            .field("rings", &self._maps.len())
            .finish_non_exhaustive()
    }
}

impl Rings {
    /// Creates a ring of `bytes` (a power of two, a multiple of the page
    /// size `page`) for each CPU of `cpus` and puts it at the CPU's index
    /// of `outer`.
    pub fn create(
        outer: &dyn MapCore,
        cpus: &[u32],
        bytes: u32,
        page: usize,
    ) -> Result<Self, BpfError> {
        let opts = libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        };
        let mut maps = Vec::with_capacity(cpus.len());
        let mut rings = Vec::with_capacity(cpus.len());
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
            rings.push(
                RingMap::new(ring.as_fd(), bytes as usize, page)
                    .map_err(|e| BpfError::kernel(format!("mapping the ring of CPU {cpu}"), e))?,
            );
            maps.push(ring);
        }
        Ok(Rings {
            rings,
            cpus: cpus.to_vec(),
            undecodable: Arc::new(AtomicU64::new(0)),
            level: epoll_over(&maps, false)?,
            edge: epoll_over(&maps, true)?,
            _maps: maps,
        })
    }

    /// Waits up to `timeout` for a ring to pass the wake-up threshold, then
    /// reads every ring, calling `f(cpu, event)` for each record; returns
    /// how many it passed on.
    pub fn read(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(u32, crate::SchedEvent),
    ) -> Result<usize, BpfError> {
        wait(&self.level, timeout)?;
        let mut n = 0;
        for (ring, &cpu) in self.rings.iter().zip(&self.cpus) {
            let Some((run, end)) = ring.pending(ring.size()) else {
                continue;
            };
            for record in records(run) {
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
            ring.consume(end);
        }
        Ok(n)
    }

    /// The count of records taken off a ring and not handed on.
    pub fn undecodable(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.undecodable)
    }

    /// A descriptor that polls readable while a woken ring holds records.
    pub fn wait_fd(&self) -> RawFd {
        self.level.as_raw_fd()
    }
}

/// Waits up to `timeout` for `epoll` to be readable (an interrupted wait
/// counts as a wake-up).
fn wait(epoll: &OwnedFd, timeout: Duration) -> Result<(), BpfError> {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 8];
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `events` is a valid array of its length.
    let n = unsafe {
        libc::epoll_wait(
            epoll.as_raw_fd(),
            events.as_mut_ptr(),
            events.len() as i32,
            ms,
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(BpfError::kernel("waiting for the rings", e));
        }
    }
    Ok(())
}

/// An epoll descriptor watching `maps`: level-triggered, readable while a
/// ring holds records after a wake-up; edge-triggered (`edge`), a ring's
/// wake-up makes it readable until [`RingDrain::rearm`] takes it, however
/// many records come meanwhile (a waiter woken by a level-triggered one
/// would spin on a busy machine).
fn epoll_over(maps: &[MapHandle], edge: bool) -> Result<OwnedFd, BpfError> {
    let io = |what: &str| BpfError::kernel(what.to_string(), std::io::Error::last_os_error());
    // SAFETY: epoll_create1 has no memory effects; a valid descriptor is
    // owned by the OwnedFd at once.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return Err(io("creating the rings' epoll descriptor"));
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
    for (i, map) in maps.iter().enumerate() {
        let mut ev = libc::epoll_event {
            events: if edge {
                (libc::EPOLLIN | libc::EPOLLET) as u32
            } else {
                libc::EPOLLIN as u32
            },
            u64: i as u64,
        };
        // SAFETY: both descriptors are open; `ev` is a valid epoll_event.
        let rc = unsafe {
            libc::epoll_ctl(
                epoll.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                map.as_fd().as_raw_fd(),
                &mut ev,
            )
        };
        if rc < 0 {
            return Err(io("watching a ring"));
        }
    }
    Ok(epoll)
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
    flusher: Arc<Flusher>,
}

impl RingDrain {
    pub(crate) fn new(rings: Rings, flusher: Arc<Flusher>) -> Self {
        RingDrain { rings, flusher }
    }

    /// Call before [`RingDrain::drain`] at `now` (`CLOCK_MONOTONIC` ns):
    /// flushes the programs' batches that went stale and returns the
    /// oldest time still batched (`u64::MAX`: none). Every record stamped
    /// before it is in the rings, so a reader may release what it read
    /// up to there.
    pub fn hold_back(&self, now: u64) -> u64 {
        self.flusher.hold_back(now)
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
    /// holding some (whole records, in the ring's own framing: [`records`]
    /// walks them, in order), which returns whether it took them; bytes
    /// not taken stay in the kernel's ring for the next call.
    pub fn drain(&mut self, place: &mut dyn FnMut(usize, &[u8]) -> bool) -> Result<(), BpfError> {
        for (i, ring) in self.rings.rings.iter().enumerate() {
            if let Some((run, end)) = ring.pending(ring.size()) {
                if place(i, run) {
                    ring.consume(end);
                }
            }
        }
        Ok(())
    }
}
