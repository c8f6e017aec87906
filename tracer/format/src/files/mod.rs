//! Files idleflow creates and reads with its privileges (root, or
//! CAP_PERFMON + CAP_BPF), in places that other users may write: the one
//! way it does either (the threat model is `docs/SECURITY.md`).
//!
//! Owns: creating every file a recording, a dump or an output becomes
//! ([`stage`], [`Dir::stage`], [`create_output`]), and opening what a
//! recorded program or another user controls ([`read_untrusted`],
//! [`open_untrusted`]).
//!
//! Invariants:
//! - A file is created new (`O_CREAT | O_EXCL | O_NOFOLLOW`), mode 0600
//!   from its creation, under an unguessable name, in a directory opened
//!   once and used by its descriptor ([`Dir`]), and renamed into place
//!   ([`Staged::commit`]): an existing file at the final name is replaced
//!   by the rename, never opened and truncated, and nothing is ever
//!   written through a link, symbolic or hard, that someone planted.
//! - A directory that others can write is refused ([`FilesError::Shared`])
//!   unless it is sticky, where nobody else can rename or remove what
//!   idleflow made and its names are unguessable.
//! - A file read from another user's reach is opened without following a
//!   link and without blocking, must be a regular file owned by root,
//!   idleflow's user or an owner the caller names (the target's user), and
//!   is read up to a bound; anything else is an [`Untrusted`] error the
//!   caller writes down and goes on without.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};

/// Errors of this module: what was refused or failed, and where.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// A directory others can write without the sticky bit: anyone there
    /// could swap what idleflow writes for a link.
    #[error(
        "{} is writable by other users (mode {mode:04o}) and not sticky: idleflow writes \
         no file there; use a directory only you can write (mkdir -m 700 DIR)",
        path.display()
    )]
    Shared { path: PathBuf, mode: u32 },
    /// A system call failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl FilesError {
    fn io(what: &'static str, path: &Path) -> impl FnOnce(rustix::io::Errno) -> FilesError {
        let path = path.to_path_buf();
        move |e| FilesError::Io {
            what,
            path,
            source: e.into(),
        }
    }
}

impl From<FilesError> for std::io::Error {
    fn from(e: FilesError) -> Self {
        let kind = match &e {
            FilesError::Io { source, .. } => source.kind(),
            FilesError::Shared { .. } => std::io::ErrorKind::PermissionDenied,
        };
        std::io::Error::new(kind, e.to_string())
    }
}

/// A directory, opened once: the files idleflow makes in it are made
/// through this descriptor, so a directory swapped for a link after it was
/// opened changes nothing.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    /// Sticky and writable by others (`/tmp`): allowed, and said.
    shared: bool,
}

impl Dir {
    /// Opens the directory `path` ("" is the working directory) and checks
    /// that nobody else can replace what idleflow makes in it.
    pub fn open(path: &Path) -> Result<Dir, FilesError> {
        let shown = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            path
        };
        let fd = rfs::open(
            shown,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(FilesError::io("cannot open the directory", shown))?;
        let st = rfs::fstat(&fd).map_err(FilesError::io("cannot read", shown))?;
        let mode = st.st_mode & 0o7777;
        let others_write = mode & 0o022 != 0;
        let sticky = mode & 0o1000 != 0;
        if others_write && !sticky {
            return Err(FilesError::Shared {
                path: shown.to_path_buf(),
                mode,
            });
        }
        Ok(Dir {
            fd,
            // As given: "" joins to a bare file name, as the user wrote it.
            path: path.to_path_buf(),
            shared: others_write,
        })
    }

    /// The directory of the file at `path`, opened, and the file's name.
    pub fn of(path: &Path) -> Result<(Dir, OsString), FilesError> {
        let name = path.file_name().ok_or_else(|| FilesError::Io {
            what: "not a file name:",
            path: path.to_path_buf(),
            source: std::io::ErrorKind::InvalidInput.into(),
        })?;
        let dir = path.parent().unwrap_or(Path::new(""));
        Ok((Dir::open(dir)?, name.to_owned()))
    }

    /// Its path, as given ("" for the working directory).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its path for messages: "." for the working directory.
    fn shown(&self) -> &Path {
        if self.path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &self.path
        }
    }

    /// Writable by others, but sticky (like `/tmp`).
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// Creates the file `name` new: `O_EXCL` (a name that exists, a link
    /// included, is an `AlreadyExists` error), never through a link, 0600.
    pub fn create_new(&self, name: &OsStr) -> std::io::Result<File> {
        let fd = rfs::openat(
            &self.fd,
            name,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        // The umask may have taken bits away, never added any; set exactly.
        rfs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
        Ok(File::from(fd))
    }

    /// Creates a new file named `{name}.{random}{suffix}` ([`Dir::create_new`]);
    /// its name is returned with it.
    pub fn create_temp(&self, name: &OsStr, suffix: &str) -> std::io::Result<(File, OsString)> {
        for _ in 0..16 {
            let mut temp = name.to_owned();
            temp.push(".");
            temp.push(random_name());
            temp.push(suffix);
            match self.create_new(&temp) {
                Ok(f) => return Ok((f, temp)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "16 random names were all taken",
        ))
    }

    /// Renames `from` to `to` in this directory: whatever is at `to` (a
    /// file, a link) is replaced, not written to.
    pub fn rename(&self, from: &OsStr, to: &OsStr) -> std::io::Result<()> {
        Ok(rfs::renameat(&self.fd, from, &self.fd, to)?)
    }

    /// Renames `from` to `to`, which must not exist (`RENAME_NOREPLACE`).
    pub fn rename_new(&self, from: &OsStr, to: &OsStr) -> std::io::Result<()> {
        Ok(rfs::renameat_with(
            &self.fd,
            from,
            &self.fd,
            to,
            rfs::RenameFlags::NOREPLACE,
        )?)
    }

    /// Removes the entry `name` (a file or a link, never what it points to).
    pub fn remove(&self, name: &OsStr) -> std::io::Result<()> {
        Ok(rfs::unlinkat(&self.fd, name, AtFlags::empty())?)
    }

    /// The entry `name` as it is (a link is not followed); None if missing.
    pub fn stat(&self, name: &OsStr) -> Option<rfs::Stat> {
        rfs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).ok()
    }

    /// Opens `name` for writing over: only a regular file of idleflow's own
    /// user with no other name (a hard link planted by someone else has
    /// two), never through a link.
    pub fn open_own(&self, name: &OsStr) -> std::io::Result<File> {
        let fd = rfs::openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let st = rfs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
            || st.st_uid != rustix::process::geteuid().as_raw()
            || st.st_nlink != 1
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "not a private file of idleflow's own",
            ));
        }
        Ok(File::from(fd))
    }

    /// Makes the directory `name` in this one, mode `mode` (0700 for a
    /// private one), new: an existing entry is an `AlreadyExists` error.
    pub fn make_dir(&self, name: &OsStr, mode: u32) -> std::io::Result<Dir> {
        rfs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode))?;
        let fd = rfs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        rfs::fchmod(&fd, Mode::from_raw_mode(mode))?;
        Ok(Dir {
            fd,
            path: self.path.join(name),
            shared: false,
        })
    }

    /// Stages the file `name` in this directory ([`stage`]). A directory,
    /// a device, a FIFO or a socket at `name`, or a link to one
    /// (`/dev/stdout`), is refused: a file is renamed over `name`, which
    /// would replace it.
    pub fn stage(self: &Arc<Self>, name: &OsStr) -> Result<(File, Staged), FilesError> {
        let not_a_file = |what: &'static str| FilesError::Io {
            what,
            path: self.path.join(name),
            source: std::io::ErrorKind::InvalidInput.into(),
        };
        if let Some(st) = self.stat(name) {
            let mut kind = FileType::from_raw_mode(st.st_mode);
            let me = rustix::process::geteuid().as_raw();
            if kind == FileType::Symlink && (st.st_uid == 0 || st.st_uid == me) {
                // A link root or idleflow's user made on purpose
                // (`/dev/stdout`, a file kept on another disk): neither
                // replaced nor written through. One someone else planted
                // is replaced.
                return Err(not_a_file(
                    "a symbolic link, which this output would replace (it is renamed into \
                     place when complete); name the file it points to, or another name:",
                ));
            }
            if kind == FileType::Symlink {
                kind = rfs::statat(&self.fd, name, AtFlags::empty())
                    .map_or(FileType::RegularFile, |st| {
                        FileType::from_raw_mode(st.st_mode)
                    });
            }
            match kind {
                FileType::RegularFile | FileType::Symlink => {}
                FileType::Directory => return Err(not_a_file("a directory is in the way:")),
                _ => {
                    return Err(not_a_file(
                        "not a file (a device, a FIFO or a socket; this output is renamed into \
                         place when complete, so it must name a file):",
                    ))
                }
            }
        }
        let (file, temp) = self
            .create_temp(name, ".partial")
            .map_err(|source| FilesError::Io {
                what: "cannot create a file in",
                path: self.shown().to_path_buf(),
                source,
            })?;
        Ok((
            file,
            Staged {
                dir: Arc::clone(self),
                temp,
                name: name.to_owned(),
            },
        ))
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Eight characters from the kernel's random source, in `[0-9a-z]`.
fn random_name() -> String {
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut bytes = [0u8; 8];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            // No random source at all: the time's nanoseconds are the
            // fallback (O_EXCL still refuses a planted name).
            Err(_) => {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                bytes = (t ^ u64::from(std::process::id()) << 40).to_le_bytes();
                break;
            }
        }
    }
    bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// A file written under a temporary name in its directory until
/// [`Staged::commit`] renames it to its final one.
#[derive(Debug, Clone)]
pub struct Staged {
    dir: Arc<Dir>,
    temp: OsString,
    name: OsString,
}

impl Staged {
    /// A file of idleflow's own already in `dir` as `temp` (made there
    /// with [`Dir::create_temp`] or checked with [`Dir::open_own`]), to be
    /// renamed to `name`.
    pub fn adopt(dir: &Arc<Dir>, temp: OsString, name: OsString) -> Staged {
        Staged {
            dir: Arc::clone(dir),
            temp,
            name,
        }
    }

    /// The final path.
    pub fn path(&self) -> PathBuf {
        self.dir.path.join(&self.name)
    }

    /// The temporary path (`NAME.RANDOM.partial`), where the file is until
    /// it is committed.
    pub fn temp_path(&self) -> PathBuf {
        self.dir.path.join(&self.temp)
    }

    /// The directory.
    pub fn dir(&self) -> &Arc<Dir> {
        &self.dir
    }

    /// Renames the file to its final name, replacing what is there.
    pub fn commit(&self) -> std::io::Result<()> {
        self.dir.rename(&self.temp, &self.name)
    }

    /// Removes the temporary file (what was written is not wanted).
    pub fn discard(&self) {
        let _ = self.dir.remove(&self.temp);
    }
}

/// A new directory of idleflow's (0700, `PREFIXRANDOM`) in the system's
/// temporary directory (`$TMPDIR`, else `/tmp`), which must follow
/// [`Dir::open`]'s rule: where others could rename the new directory away
/// and put one of theirs under its name, it is refused.
pub fn private_tempdir(prefix: &str) -> Result<tempfile::TempDir, FilesError> {
    let parent = std::env::temp_dir();
    Dir::open(&parent)?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&parent)
        .map_err(|source| FilesError::Io {
            what: "cannot create a directory in",
            path: parent,
            source,
        })
}

/// Makes every write to `file` an append (`O_APPEND`): writers sharing it
/// never overwrite each other's lines.
pub fn set_append(file: &File) -> std::io::Result<()> {
    Ok(rfs::fcntl_setfl(file, OFlags::APPEND)?)
}

/// Creates the file that will be `path` ([`Dir::of`], [`Dir::stage`]): new,
/// 0600, under `NAME.RANDOM.partial` beside it until it is committed.
pub fn stage(path: &Path) -> Result<(File, Staged), FilesError> {
    let (dir, name) = Dir::of(path)?;
    Arc::new(dir).stage(&name)
}

/// The temporary files `NAME.*.partial` beside `path` ([`stage`]'s): a
/// recorder that was killed leaves one.
pub fn partials_of(path: &Path) -> Vec<PathBuf> {
    let Some(name) = path.file_name() else {
        return Vec::new();
    };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let Ok(entries) = std::fs::read_dir(dir.unwrap_or(Path::new("."))) else {
        return Vec::new();
    };
    let mut prefix = name.to_owned();
    prefix.push(".");
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| {
            let n = n.as_bytes();
            n.starts_with(prefix.as_bytes())
                && n.ends_with(b".partial")
                && n.len() == prefix.len() + 8 + ".partial".len()
        })
        .map(|n| dir.map_or_else(|| PathBuf::from(&n), |d| d.join(&n)))
        .collect();
    found.sort();
    found
}

/// An output written with `-o PATH`: a file staged beside `PATH` and
/// renamed into place when [`Output::commit`] is called, or a terminal, a
/// pipe or `/dev/stdout` written as it is (nothing there to replace).
#[derive(Debug)]
pub struct Output {
    /// Where the bytes go.
    pub file: File,
    /// The name to commit to; None for a terminal or pipe.
    staged: Option<Staged>,
}

impl Output {
    /// Renames a staged file into place (nothing for a terminal or pipe).
    pub fn commit(&self) -> std::io::Result<()> {
        self.staged.as_ref().map_or(Ok(()), Staged::commit)
    }

    /// Removes a staged file that will not be committed.
    pub fn discard(&self) {
        if let Some(s) = &self.staged {
            s.discard();
        }
    }
}

/// Opens `path` for an output ([`Output`]): a character device, a FIFO or
/// a socket (`/dev/null`), or a link root or idleflow's user made
/// (`/dev/stdout`, whatever it points to), is written as it is; anything
/// else — a file, nothing, a link someone else planted — is staged
/// ([`stage`]) and renamed into place.
pub fn create_output(path: &Path) -> Result<Output, FilesError> {
    if let Some(file) = open_stream(path)? {
        return Ok(Output { file, staged: None });
    }
    let (file, staged) = stage(path)?;
    Ok(Output {
        file,
        staged: Some(staged),
    })
}

/// [`create_output`]'s streams: `Some` for a device or a pipe.
fn open_stream(path: &Path) -> Result<Option<File>, FilesError> {
    let Ok(lst) = rfs::lstat(path) else {
        return Ok(None);
    };
    let me = rustix::process::geteuid().as_raw();
    let kind = FileType::from_raw_mode(lst.st_mode);
    let trusted_link = kind == FileType::Symlink && (lst.st_uid == 0 || lst.st_uid == me);
    if trusted_link {
        // A link root or idleflow's user made (`/dev/stdout`, whatever
        // standard output is): written through, as asked, as before.
        let fd = rfs::open(
            path,
            OFlags::WRONLY | OFlags::TRUNC | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(FilesError::io("cannot open", path))?;
        let st = rfs::fstat(&fd).map_err(FilesError::io("cannot read", path))?;
        if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
            rfs::fchmod(&fd, Mode::from_raw_mode(0o600))
                .map_err(FilesError::io("cannot make private", path))?;
        }
        return Ok(Some(File::from(fd)));
    }
    if !matches!(
        kind,
        FileType::CharacterDevice | FileType::Fifo | FileType::Socket
    ) {
        // A file, nothing, or a link someone else planted: staged.
        return Ok(None);
    }
    let fd = rfs::open(
        path,
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(FilesError::io("cannot open", path))?;
    let st = rfs::fstat(&fd).map_err(FilesError::io("cannot read", path))?;
    if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
        // Swapped for a file since it was looked at: not written through.
        return Err(FilesError::Io {
            what: "changed while it was opened:",
            path: path.to_path_buf(),
            source: std::io::ErrorKind::PermissionDenied.into(),
        });
    }
    Ok(Some(File::from(fd)))
}

/// Why a file in another user's reach was not read.
#[derive(Debug, thiserror::Error)]
pub enum Untrusted {
    /// Not there (not an error worth a note).
    #[error("{} does not exist", .0.display())]
    Missing(PathBuf),
    /// A symbolic link.
    #[error("{} is a symbolic link", .0.display())]
    Link(PathBuf),
    /// A FIFO, a device, a directory, a socket.
    #[error("{} is not a regular file ({kind})", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    /// Owned by a user that is neither root, idleflow's nor one allowed.
    #[error("{} is owned by uid {uid}, not by root, idleflow's user or the target's", path.display())]
    Owner { path: PathBuf, uid: u32 },
    /// Longer than the caller's bound.
    #[error("{} is {len} bytes, over the bound of {limit}", path.display())]
    TooLong { path: PathBuf, len: u64, limit: u64 },
    /// Could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Opens `path`, which another user may control, for reading: never
/// through a link, never blocking on a FIFO; a regular file owned by root,
/// idleflow's user or one of `owners`, at most `limit` bytes long. Returns
/// the file and its length.
pub fn open_untrusted(path: &Path, owners: &[u32], limit: u64) -> Result<(File, u64), Untrusted> {
    let fd = rfs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::NOENT => Untrusted::Missing(path.to_path_buf()),
        rustix::io::Errno::LOOP => Untrusted::Link(path.to_path_buf()),
        e => Untrusted::Io {
            path: path.to_path_buf(),
            source: e.into(),
        },
    })?;
    let st = rfs::fstat(&fd).map_err(|e| Untrusted::Io {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => None,
        FileType::Fifo => Some("a FIFO"),
        FileType::CharacterDevice => Some("a character device"),
        FileType::BlockDevice => Some("a block device"),
        FileType::Directory => Some("a directory"),
        FileType::Socket => Some("a socket"),
        _ => Some("of an unknown kind"),
    };
    if let Some(kind) = kind {
        return Err(Untrusted::NotRegular {
            path: path.to_path_buf(),
            kind,
        });
    }
    let uid = st.st_uid;
    if uid != 0 && uid != rustix::process::geteuid().as_raw() && !owners.contains(&uid) {
        return Err(Untrusted::Owner {
            path: path.to_path_buf(),
            uid,
        });
    }
    let len = st.st_size as u64;
    if len > limit {
        return Err(Untrusted::TooLong {
            path: path.to_path_buf(),
            len,
            limit,
        });
    }
    // Back to blocking reads: a regular file never blocks anyway.
    let _ = rustix::fs::fcntl_setfl(&fd, OFlags::empty());
    Ok((File::from(fd), len))
}

/// Opens `path` for reading, following links (a path another program
/// named, such as a mapped file's), but only a regular file: a FIFO or a
/// device put there is refused, never waited on.
pub fn open_regular(path: &Path) -> Result<File, Untrusted> {
    let io = |e: rustix::io::Errno| Untrusted::Io {
        path: path.to_path_buf(),
        source: e.into(),
    };
    let fd = rfs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io)?;
    let st = rfs::fstat(&fd).map_err(io)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(Untrusted::NotRegular {
            path: path.to_path_buf(),
            kind: "not a file",
        });
    }
    let _ = rfs::fcntl_setfl(&fd, OFlags::empty());
    Ok(File::from(fd))
}

/// Reads the whole of `path` under [`open_untrusted`]'s rules; a file that
/// grows past `limit` while it is read is refused too.
pub fn read_untrusted(path: &Path, owners: &[u32], limit: u64) -> Result<Vec<u8>, Untrusted> {
    let (file, len) = open_untrusted(path, owners, limit)?;
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| Untrusted::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(Untrusted::TooLong {
            path: path.to_path_buf(),
            len: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// Creates the empty file `path` as a marker another program looks for
/// (a JVM's `.attach_pid`): new (`O_EXCL`), never through a link, 0600.
/// `Ok(false)` when a regular file is there already: it is left as it is
/// (and not the caller's to remove).
pub fn create_marker(path: &Path) -> std::io::Result<bool> {
    match rfs::open(
        path,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    ) {
        Ok(_) => Ok(true),
        Err(rustix::io::Errno::EXIST) => {
            let st = rfs::lstat(path)?;
            if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
                Ok(false)
            } else {
                Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "something that is not a file is there",
                ))
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// Gives the file at `path` to `uid`:`gid` when it is a regular file of
/// root's with one name (the recording `sudo idleflow record` made): opened
/// without following a link and changed on the descriptor, so a name
/// swapped for a link, or a hard link to another file, is never given.
/// Returns whether it was given.
pub fn give_to(path: &Path, uid: u32, gid: u32) -> std::io::Result<bool> {
    let fd = rfs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rfs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
        || st.st_uid != 0
        || st.st_nlink != 1
    {
        return Ok(false);
    }
    rfs::fchown(
        &fd,
        Some(rustix::process::Uid::from_raw(uid)),
        Some(rustix::process::Gid::from_raw(gid)),
    )?;
    Ok(true)
}

/// The owner of process `pid` (its real uid, from `/proc/PID/status`):
/// the user whose files a target may write.
pub fn process_uid(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests;
