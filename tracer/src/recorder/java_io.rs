//! What a Java thread's socket or file wait is on (`record --java vm`):
//! the peer's address, or the file's path — what the flight recorder's
//! socket and file events say, without the flight recorder.
//!
//! The file descriptor is the system call's first argument at the
//! switch-out (the recorder takes it with the stack copy): a `read`'s or
//! `recv`'s descriptor itself, or, where it is an address inside the copy
//! (`poll`'s `struct pollfd`, which `NioSocketImpl.park` → `Net.poll`
//! keeps on its stack), the descriptor it holds. `/proc/PID/fd` then names
//! the descriptor (`procfs`), and a socket's inode is looked up in the
//! process's `/proc/PID/net/tcp` and `tcp6`.
//!
//! Invariant: an object is named from the switch-out's own argument or
//! stack copy, never guessed; the peers read are remembered per inode
//! (bounded), and the tables read again at most every [`REREAD`] for an
//! inode not found.

use std::time::{Duration, Instant};

use idleflow_format::WaitReason;
use procfs::process::{FDTarget, Process};
use rustc_hash::FxHashMap;

use crate::parse::UserStackCopy;

/// An inode not in the tables is looked for again after this.
const REREAD: Duration = Duration::from_millis(200);
/// Peers remembered (then forgotten all at once).
const MAX_PEERS: usize = 1 << 14;
/// The highest number taken for a descriptor rather than an address.
const MAX_FD: u64 = 1 << 20;

/// The peers and paths of the JVMs' descriptors.
#[derive(Debug)]
pub struct JavaIo {
    /// (pid, socket inode) → the peer, as the report shows it.
    peers: FxHashMap<(u32, u64), String>,
    /// When each process's tables were last read.
    read_at: FxHashMap<u32, Instant>,
    /// The machine's ephemeral ports: a peer's port in them is `*`.
    ephemeral: (u16, u16),
}

impl Default for JavaIo {
    fn default() -> Self {
        Self {
            peers: FxHashMap::default(),
            read_at: FxHashMap::default(),
            ephemeral: ephemeral_ports(),
        }
    }
}

impl JavaIo {
    /// What thread of `pid` waiting for `reason` at the switch-out whose
    /// stack copy is `u` waits on: a socket's peer (`127.0.0.1:9092`,
    /// `127.0.0.1:*`) or a file's path.
    pub fn object(&mut self, pid: u32, reason: WaitReason, u: &UserStackCopy) -> Option<String> {
        let socket = matches!(reason, WaitReason::SocketRead | WaitReason::SocketWrite);
        let file = matches!(
            reason,
            WaitReason::FileRead | WaitReason::FileWrite | WaitReason::FileForce
        );
        if !socket && !file {
            return None;
        }
        let fd = descriptor(u)?;
        let target = Process::new(pid as i32).ok()?.fd_from_fd(fd).ok()?.target;
        match target {
            FDTarget::Socket(inode) if socket => self.peer(pid, inode),
            FDTarget::Path(path) if file => Some(path.to_string_lossy().into_owned()),
            _ => None,
        }
    }

    /// The peer of socket `inode` of `pid`.
    fn peer(&mut self, pid: u32, inode: u64) -> Option<String> {
        if let Some(p) = self.peers.get(&(pid, inode)) {
            return Some(p.clone());
        }
        if self
            .read_at
            .get(&pid)
            .is_some_and(|at| at.elapsed() < REREAD)
        {
            return None;
        }
        self.read_at.insert(pid, Instant::now());
        let process = Process::new(pid as i32).ok()?;
        if self.peers.len() >= MAX_PEERS {
            self.peers.clear();
        }
        let entries = process
            .tcp()
            .unwrap_or_default()
            .into_iter()
            .chain(process.tcp6().unwrap_or_default());
        let (lo, hi) = self.ephemeral;
        for e in entries {
            let a = e.remote_address;
            let ip = match a.ip() {
                std::net::IpAddr::V6(v6) => v6
                    .to_ipv4_mapped()
                    .map_or_else(|| v6.to_string(), |v4| v4.to_string()),
                v4 => v4.to_string(),
            };
            let peer = if (lo..=hi).contains(&a.port()) {
                format!("{ip}:*")
            } else {
                format!("{ip}:{}", a.port())
            };
            self.peers.insert((pid, e.inode), peer);
        }
        self.peers.get(&(pid, inode)).cloned()
    }
}

/// The descriptor the system call of copy `u` waited on: its first
/// argument, or the `pollfd` that argument points at inside the copy.
fn descriptor(u: &UserStackCopy) -> Option<i32> {
    if u.di < MAX_FD {
        return i32::try_from(u.di).ok();
    }
    let at = usize::try_from(u.di.checked_sub(u.sp)?).ok()?;
    let b = u.bytes.get(at..at.checked_add(4)?)?;
    let fd = i32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
    (fd >= 0).then_some(fd)
}

/// The machine's ephemeral port range (`ip_local_port_range`; Linux's
/// default where it cannot be read).
fn ephemeral_ports() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|n| n.parse::<u16>());
            Some((it.next()?.ok()?, it.next()?.ok()?))
        })
        .unwrap_or((32768, 60999))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(di: u64, sp: u64, bytes: Vec<u8>) -> UserStackCopy {
        UserStackCopy {
            ip: 0,
            sp,
            bp: 0,
            di,
            runs: None,
            java_anchor: None,
            java_monitors: None,
            java_blocker: None,
            requested: bytes.len() as u32,
            bytes,
        }
    }

    #[test]
    fn the_descriptor_is_the_argument_or_the_pollfd_it_points_at_in_the_copy() {
        assert_eq!(descriptor(&copy(7, 0x7000, vec![])), Some(7));
        let mut b = vec![0u8; 64];
        b[16..20].copy_from_slice(&42i32.to_ne_bytes());
        assert_eq!(
            descriptor(&copy(0x7ffd_0010, 0x7ffd_0000, b.clone())),
            Some(42)
        );
        // Outside the copy: not read.
        assert_eq!(descriptor(&copy(0x7ffd_1000, 0x7ffd_0000, b.clone())), None);
        assert_eq!(descriptor(&copy(0x7ffc_0000, 0x7ffd_0000, b)), None);
    }

    #[test]
    fn a_loopback_sockets_peer_is_named_by_its_inode() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = server.local_addr().unwrap().port();
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (_accepted, _) = server.accept().unwrap();
        use std::os::fd::AsRawFd;
        let fd = client.as_raw_fd();
        let mut io = JavaIo::default();
        let pid = std::process::id();
        let name = io.object(pid, WaitReason::SocketRead, &copy(fd as u64, 0, vec![]));
        let (lo, hi) = io.ephemeral;
        let want = if (lo..=hi).contains(&port) {
            "127.0.0.1:*".to_string()
        } else {
            format!("127.0.0.1:{port}")
        };
        assert_eq!(name, Some(want));
        // A socket is no file, and a sleep has no object.
        assert_eq!(
            io.object(pid, WaitReason::FileRead, &copy(fd as u64, 0, vec![])),
            None
        );
        assert_eq!(
            io.object(pid, WaitReason::Sleep, &copy(fd as u64, 0, vec![])),
            None
        );
    }
}
