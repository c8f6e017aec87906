//! The wire formats of the tools idleflow exports to, as message types
//! generated from vendored `.proto` files (`protos/`, see their headers for
//! origin and license): nothing else. What goes into them is the
//! post-processor's job (`idleflow_postproc::render::pprof`,
//! `idleflow_postproc::render::perfetto`), from the one path model.
//!
//! Invariant: the vendored files keep upstream's field numbers, so a file
//! written with these types reads in upstream's tools.

/// pprof's `profile.proto` (google/pprof): read by `go tool pprof`,
/// Pyroscope, Parca, Grafana, speedscope. Written gzip-compressed.
#[allow(missing_docs, clippy::all, missing_debug_implementations)]
pub mod pprof {
    include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
}

/// The part of Perfetto's trace protos idleflow writes (scheduling, the
/// process tree, samples with interned call stacks, tracks): read by
/// ui.perfetto.dev and `trace_processor`.
#[allow(missing_docs, clippy::all, missing_debug_implementations)]
pub mod perfetto {
    include!(concat!(env!("OUT_DIR"), "/perfetto.protos.rs"));
}

pub use prost::Message;
