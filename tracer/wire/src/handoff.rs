//! Handing the thread work area to a JVM that runs as another user.
//!
//! The recorder (root) creates the work area owner-only (0600), so a JVM
//! that `runuser`, `sudo -u` or a service manager started as another user
//! cannot open it by path. Instead it asks the recorder over a Unix socket
//! beside the work area: the recorder checks who is asking (the kernel's
//! `SO_PEERCRED`: a process of the recorded command's tree), then passes an
//! open descriptor of the work area (`SCM_RIGHTS`) with a one-line reply
//! naming a tree-dump directory it made for that JVM, owned by the JVM's
//! user. The file never becomes world-writable; only processes the
//! recorder vouches for get a descriptor.
//!
//! Protocol (one request per connection, lines end in `\n`):
//! - `twa\n` → `ok trees=DIR\n` with the descriptor, or `refused WHY\n`.
//! - `note TEXT\n` → nothing: a JVM agent reports why it runs without call
//!   trees; the recorder keeps the note for the report.
//!
//! Invariant: a descriptor is only ever sent after the peer was checked,
//! and at most one per connection.

use std::io::{self, BufRead, BufReader, IoSlice, IoSliceMut, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use nix::sys::socket::{
    getsockopt, recvmsg, sendmsg, sockopt::PeerCredentials, ControlMessage, ControlMessageOwned,
    MsgFlags,
};

/// Who is on the other end of a connection, as the kernel says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Process id.
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// A request read by the recorder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Send me the work area.
    WorkArea,
    /// A note for the report.
    Note(String),
}

/// The credentials of the process on the other end of `stream`.
pub fn peer(stream: &UnixStream) -> io::Result<Peer> {
    let c = getsockopt(stream, PeerCredentials).map_err(io::Error::from)?;
    Ok(Peer {
        pid: c.pid() as u32,
        uid: c.uid(),
        gid: c.gid(),
    })
}

/// Reads the request line of a connection (recorder side).
pub fn read_request(stream: &UnixStream) -> io::Result<Request> {
    let mut line = String::new();
    // A request line is at most 4 KiB.
    BufReader::new(io::Read::take(stream, 4096)).read_line(&mut line)?;
    let line = line.trim_end_matches('\n');
    match line.split_once(' ') {
        _ if line == "twa" => Ok(Request::WorkArea),
        Some(("note", text)) => Ok(Request::Note(text.to_string())),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unknown request `{line}`"),
        )),
    }
}

/// Sends the work area `fd` with the reply `ok trees=DIR` (recorder side).
pub fn grant(stream: &UnixStream, fd: BorrowedFd<'_>, tree_dir: &Path) -> io::Result<()> {
    let reply = format!("ok trees={}\n", tree_dir.display());
    let fds = [fd.as_raw_fd()];
    sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(reply.as_bytes())],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .map_err(io::Error::from)?;
    Ok(())
}

/// Refuses a request, saying why (recorder side).
pub fn refuse(mut stream: &UnixStream, why: &str) -> io::Result<()> {
    stream.write_all(format!("refused {}\n", why.replace('\n', " ")).as_bytes())
}

/// Asks the recorder listening at `socket` for the work area (agent side):
/// the descriptor and the tree-dump directory made for this JVM.
pub fn request(socket: &Path) -> io::Result<(OwnedFd, String)> {
    let mut stream = UnixStream::connect(socket)?;
    stream.write_all(b"twa\n")?;
    let mut buf = [0u8; 4096];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let (n, fd) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = recvmsg::<()>(
            stream.as_fd().as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        let mut fd = None;
        for c in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(fds) = c {
                for raw in fds {
                    // SAFETY: the kernel just installed `raw` in this
                    // process for us; nobody else owns it. Extra ones are
                    // closed when their OwnedFd drops.
                    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                    fd.get_or_insert(owned);
                }
            }
        }
        (msg.bytes, fd)
    };
    let reply = String::from_utf8_lossy(&buf[..n]);
    let reply = reply.trim_end();
    match (reply.strip_prefix("ok trees="), fd) {
        (Some(dir), Some(fd)) => Ok((fd, dir.to_string())),
        _ => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the recorder did not hand over the work area: {}",
                reply.strip_prefix("refused ").unwrap_or(reply)
            ),
        )),
    }
}

/// Tells the recorder listening at `socket` why this JVM runs without call
/// trees (agent side; best effort).
pub fn note(socket: &Path, text: &str) -> io::Result<()> {
    let mut stream = UnixStream::connect(socket)?;
    stream.write_all(format!("note {}\n", text.replace('\n', " ")).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek};

    #[test]
    fn a_descriptor_and_the_tree_dir_cross_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("s");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"work area").unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            assert_eq!(read_request(&s).unwrap(), Request::WorkArea);
            let p = peer(&s).unwrap();
            assert_eq!(p.pid, std::process::id());
            grant(&s, file.as_fd(), Path::new("/trees/42")).unwrap();
            let (s, _) = listener.accept().unwrap();
            assert_eq!(
                read_request(&s).unwrap(),
                Request::Note("agent disabled: x".into())
            );
            let (s, _) = listener.accept().unwrap();
            read_request(&s).unwrap();
            refuse(&s, "not a process of the recorded command").unwrap();
        });
        let (fd, trees) = request(&sock).unwrap();
        assert_eq!(trees, "/trees/42");
        let mut f = std::fs::File::from(fd);
        f.rewind().unwrap();
        let mut text = String::new();
        f.read_to_string(&mut text).unwrap();
        assert_eq!(text, "work area");
        note(&sock, "agent disabled: x").unwrap();
        let e = request(&sock).unwrap_err();
        assert!(
            e.to_string()
                .contains("not a process of the recorded command"),
            "{e}"
        );
        server.join().unwrap();
    }
}
