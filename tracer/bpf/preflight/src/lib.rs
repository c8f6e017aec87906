//! Nothing to link: this crate is its build script (`build.rs`), which
//! checks that the tools and libraries the eBPF recorder (`idleflow-bpf`)
//! builds with are here, and otherwise stops the build with one line that
//! names the missing Debian packages.
