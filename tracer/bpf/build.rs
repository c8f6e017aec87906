//! Compiles the BPF programs (`src/bpf/sched.bpf.c`) with clang and writes
//! their libbpf-rs skeleton into `OUT_DIR` (`sched.skel.rs`, included by
//! `src/skel.rs`). Needs `clang` on the path (set `CLANG` to use another);
//! libbpf's headers come with libbpf-cargo, the kernel types from
//! `src/bpf/kernel.h`, so no `vmlinux.h` is generated or committed.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SOURCE: &str = "src/bpf/sched.bpf.c";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut builder = SkeletonBuilder::new();
    builder.source(SOURCE).clang_args(["-Wall", "-Werror"]);
    if let Some(clang) = env::var_os("CLANG") {
        builder.clang(clang);
    }
    if let Err(e) = builder.build_and_generate(out.join("sched.skel.rs")) {
        // The whole chain (clang's own message included), and what to do.
        panic!(
            "building the BPF programs ({SOURCE}) failed: {e:#}\n\
             They need clang (Debian: apt-get install clang libelf-dev zlib1g-dev pkg-config)."
        );
    }
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-changed=src/bpf/kernel.h");
    println!("cargo:rerun-if-env-changed=CLANG");
}
