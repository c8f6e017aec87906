//! Checks, with the tools libbpf-sys and libbpf-cargo use, what building
//! `idleflow-bpf` needs: `clang` (or `$CLANG`, as `tracer/bpf/build.rs`
//! honors) for the BPF programs; `make`, `pkg-config` (or `$PKG_CONFIG`)
//! and the libelf and zlib development files (found by pkg-config) for
//! libbpf-sys's vendored libbpf. If any is missing the build stops here
//! with one line naming the Debian packages, instead of libbpf-sys's make
//! trace (`libelf.h: No such file or directory`).
//!
//! That it runs before libbpf-sys's build script is cargo's scheduling, not
//! a dependency (nothing of ours can be one of libbpf-sys's): this script
//! has no build-dependencies, so it can run at once, and `idleflow-format`
//! depends on this crate so that cargo, which starts first the units that
//! most others wait for, starts it before libbpf-sys's. On a fresh machine
//! it then fails before libbpf-sys's build script is even compiled, and
//! cargo starts nothing after a failure. (Where libbpf-sys's build script
//! was compiled before, both may run; this line still comes first.)
//!
//! It runs once: cargo runs it again only if it failed, if this file
//! changed or if `CLANG` or `PKG_CONFIG*` change. Not on a change of
//! `PATH`, which would rebuild every crate of the workspace (`sudo` has its
//! own `PATH`, rustup prepends to it).

use std::env;
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};

/// Whether `program ARGS` runs and succeeds.
fn runs(program: &OsString, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    for var in [
        "CLANG",
        "PKG_CONFIG",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        "PKG_CONFIG_SYSROOT_DIR",
    ] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    let clang = env::var_os("CLANG").unwrap_or_else(|| "clang".into());
    let pkg_config = env::var_os("PKG_CONFIG").unwrap_or_else(|| "pkg-config".into());

    let mut missing = Vec::new();
    if !runs(&clang, &["--version"]) {
        missing.push("clang");
    }
    if !runs(&"make".into(), &["--version"]) {
        missing.push("make");
    }
    if runs(&pkg_config, &["--version"]) {
        for (module, package) in [("libelf", "libelf-dev"), ("zlib", "zlib1g-dev")] {
            if !runs(&pkg_config, &["--exists", module]) {
                missing.push(package);
            }
        }
    } else {
        missing.push("pkg-config");
        // Without pkg-config, the headers where Debian puts them.
        for (header, package) in [("libelf.h", "libelf-dev"), ("zlib.h", "zlib1g-dev")] {
            if !Path::new("/usr/include").join(header).exists() {
                missing.push(package);
            }
        }
    }
    if !missing.is_empty() {
        println!(
            "cargo::error=idleflow's eBPF programs build with clang, make, pkg-config, libelf-dev \
             and zlib1g-dev; this machine lacks {}: apt-get install {} (or, as root, bash \
             .ci/install examples)",
            missing.join(", "),
            missing.join(" ")
        );
    }
}
