//! Which kernel events record the dispatches and wake-ups: eBPF programs at
//! the scheduler's tracepoints (`idleflow-bpf`, one record per switch or
//! waking, and they see the switches of a CPU leaving idle that perf's
//! samples miss on some kernels) or perf's switch records and tracepoint
//! samples (any kernel with perf events).
//!
//! Invariant: the choice is made once, before any event is opened, and the
//! recording says which source recorded and why ([`Chosen`] →
//! `RunInfo::event_source`/`event_source_why`); asking for eBPF where it
//! cannot be used is an error with the probe's reason, never a silent
//! fallback.

use idleflow_bpf::BpfError;

/// The source asked for (`record --events`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EventSource {
    /// eBPF when its probe passes here, else perf (the reason kept).
    #[default]
    Auto,
    /// perf's switch records and tracepoint samples.
    Perf,
    /// eBPF, or fail with why it cannot be used.
    Bpf,
}

/// The source that records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// perf events.
    Perf,
    /// eBPF programs.
    Bpf,
}

impl Recorded {
    /// Its name in the recording (`RunInfo::event_source`).
    pub fn name(self) -> &'static str {
        match self {
            Recorded::Perf => "perf",
            Recorded::Bpf => "bpf",
        }
    }
}

/// The source chosen, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// Which.
    pub source: Recorded,
    /// Why, in a few words (`RunInfo::event_source_why`).
    pub why: String,
}

/// Chooses the source for `asked`; `probe` says whether eBPF can be used
/// here (called only when it matters).
pub fn choose(
    asked: EventSource,
    probe: impl FnOnce() -> Result<(), BpfError>,
) -> Result<Chosen, BpfError> {
    match asked {
        EventSource::Perf => Ok(Chosen {
            source: Recorded::Perf,
            why: "--events perf".into(),
        }),
        EventSource::Bpf => probe().map(|()| Chosen {
            source: Recorded::Bpf,
            why: "--events bpf".into(),
        }),
        EventSource::Auto => Ok(match probe() {
            Ok(()) => Chosen {
                source: Recorded::Bpf,
                why: "eBPF usable here".into(),
            },
            Err(e) => Chosen {
                source: Recorded::Perf,
                why: format!("eBPF not usable: {e}"),
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> Result<(), BpfError> {
        Err(BpfError::NoCapability {
            missing: "CAP_BPF".into(),
        })
    }

    #[test]
    fn auto_takes_ebpf_when_the_probe_passes_and_perf_with_its_reason_when_not() {
        let c = choose(EventSource::Auto, || Ok(())).unwrap();
        assert_eq!(c.source, Recorded::Bpf);
        let c = choose(EventSource::Auto, refused).unwrap();
        assert_eq!(c.source, Recorded::Perf);
        assert!(
            c.why.starts_with("eBPF not usable: missing CAP_BPF"),
            "{}",
            c.why
        );
    }

    #[test]
    fn perf_asks_no_probe_and_bpf_fails_with_the_probes_reason() {
        let c = choose(EventSource::Perf, || panic!("probed")).unwrap();
        assert_eq!(c.source, Recorded::Perf);
        assert_eq!(c.source.name(), "perf");
        let e = choose(EventSource::Bpf, refused).unwrap_err();
        assert!(matches!(e, BpfError::NoCapability { .. }));
        let c = choose(EventSource::Bpf, || Ok(())).unwrap();
        assert_eq!((c.source, c.source.name()), (Recorded::Bpf, "bpf"));
    }
}
