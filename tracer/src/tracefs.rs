//! tracefs: where it is, mounting it when it is not (as `perf` does), and
//! the `format` files that give each tracepoint's id and field offsets.
//! Offsets are always read from the running kernel, never assumed.

use std::path::{Path, PathBuf};

/// Problems finding or reading tracefs.
#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    /// tracefs is not mounted and could not be mounted.
    #[error("tracefs is not mounted and could not be mounted at {path} (run as root, or mount it: mount -t tracefs nodev /sys/kernel/tracing)")]
    Mount {
        /// Where the mount was tried.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A format file is missing or unreadable.
    #[error("cannot read tracepoint format {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A format file lacks something we need.
    #[error("tracepoint format {path}: {what}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is missing.
        what: String,
    },
}

const CANDIDATES: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The tracefs mount point, mounting it at `/sys/kernel/tracing` if needed.
pub fn find_or_mount() -> Result<PathBuf, TracefsError> {
    for c in CANDIDATES {
        let events = Path::new(c).join("events");
        match std::fs::metadata(&events) {
            Ok(m) if m.is_dir() => return Ok(PathBuf::from(c)),
            Err(source) if source.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(TracefsError::Read {
                    path: events,
                    source,
                })
            }
            _ => {}
        }
    }
    let path = PathBuf::from(CANDIDATES[0]);
    let target = std::ffi::CString::new(CANDIDATES[0]).expect("no NUL in a constant");
    // SAFETY: all pointers are valid NUL-terminated strings for the call's duration.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(TracefsError::Mount {
            path,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(path)
}

/// One field of a tracepoint's raw data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Byte offset in the raw data.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

/// A tracepoint's id and fields.
#[derive(Debug, Clone)]
pub struct Tracepoint {
    /// `system:name`.
    pub name: String,
    /// The id to open it with (`perf_event_attr.config`).
    pub id: u64,
    fields: Vec<(String, Field)>,
    path: PathBuf,
}

impl Tracepoint {
    /// Reads `events/<system>/<name>/format` under `tracefs`.
    pub fn load(tracefs: &Path, system: &str, name: &str) -> Result<Self, TracefsError> {
        let path = tracefs
            .join("events")
            .join(system)
            .join(name)
            .join("format");
        let text = std::fs::read_to_string(&path).map_err(|source| TracefsError::Read {
            path: path.clone(),
            source,
        })?;
        Self::parse(&format!("{system}:{name}"), &text, path)
    }

    /// Parses the text of a `format` file.
    pub fn parse(name: &str, text: &str, path: PathBuf) -> Result<Self, TracefsError> {
        let mut id = None;
        let mut fields = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if let Some(v) = line.strip_prefix("ID:") {
                id = v.trim().parse().ok();
            } else if let Some(rest) = line.strip_prefix("field:") {
                // field:<type> <name>[N];	offset:O;	size:S;	signed:X;
                let mut parts = rest.split(';').map(str::trim);
                let decl = parts.next().unwrap_or("");
                let fname = decl
                    .rsplit(' ')
                    .next()
                    .unwrap_or("")
                    .split('[')
                    .next()
                    .unwrap_or("")
                    .to_string();
                let mut offset = None;
                let mut size = None;
                for p in parts {
                    if let Some(v) = p.strip_prefix("offset:") {
                        offset = v.parse().ok();
                    } else if let Some(v) = p.strip_prefix("size:") {
                        size = v.parse().ok();
                    }
                }
                if let (Some(offset), Some(size)) = (offset, size) {
                    fields.push((fname, Field { offset, size }));
                }
            }
        }
        let id = id.ok_or_else(|| TracefsError::Format {
            path: path.clone(),
            what: "no ID line".into(),
        })?;
        Ok(Tracepoint {
            name: name.to_string(),
            id,
            fields,
            path,
        })
    }

    /// The field `name`, which must be an integer of 4 or 8 bytes (or
    /// `size` bytes if given).
    pub fn int_field(&self, name: &str) -> Result<Field, TracefsError> {
        let f = self
            .fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| *f)
            .ok_or_else(|| TracefsError::Format {
                path: self.path.clone(),
                what: format!("no field `{name}`"),
            })?;
        if !matches!(f.size, 1 | 2 | 4 | 8) {
            return Err(TracefsError::Format {
                path: self.path.clone(),
                what: format!("field `{name}` has size {}, not an integer", f.size),
            });
        }
        Ok(f)
    }
}

impl Field {
    /// Reads this field from a tracepoint's raw data, zero-extended; `None`
    /// if the data is too short.
    pub fn read(&self, raw: &[u8]) -> Option<u64> {
        let b = raw.get(self.offset..self.offset + self.size)?;
        Some(match self.size {
            1 => u64::from(b[0]),
            2 => u64::from(u16::from_ne_bytes([b[0], b[1]])),
            4 => u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
            _ => u64::from_ne_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH: &str = "name: sched_switch
ID: 372
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;
";

    #[test]
    fn parses_ids_and_offsets() {
        let tp = Tracepoint::parse("sched:sched_switch", SWITCH, "f".into()).unwrap();
        assert_eq!(tp.id, 372);
        assert_eq!(
            tp.int_field("prev_state").unwrap(),
            Field {
                offset: 32,
                size: 8
            }
        );
        assert_eq!(
            tp.int_field("next_pid").unwrap(),
            Field {
                offset: 56,
                size: 4
            }
        );
        assert!(tp.int_field("prev_comm").is_err());
        assert!(tp.int_field("nope").is_err());
    }

    #[test]
    fn reads_fields_and_refuses_short_data() {
        let f = Field { offset: 2, size: 4 };
        assert_eq!(f.read(&[0, 0, 1, 0, 0, 0]), Some(1));
        assert_eq!(f.read(&[0, 0, 1]), None);
    }

    #[test]
    fn missing_id_is_an_error() {
        assert!(Tracepoint::parse("x", "format:\n", "f".into()).is_err());
    }
}
