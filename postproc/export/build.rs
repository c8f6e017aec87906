//! Generates the message types from the vendored `.proto` files with
//! `prost-build`, parsed by `protox` (a protobuf compiler in Rust), so that
//! building needs no `protoc`.

fn main() {
    let protos = [
        ("protos/pprof", "profile.proto"),
        ("protos/perfetto", "trace_subset.proto"),
    ];
    for (dir, _) in protos {
        println!("cargo:rerun-if-changed={dir}");
    }
    let files: Vec<String> = protos.iter().map(|(d, f)| format!("{d}/{f}")).collect();
    let includes: Vec<&str> = protos.iter().map(|(d, _)| *d).collect();
    let fds = protox::compile(&files, &includes).unwrap_or_else(|e| panic!("{e}"));
    prost_build::Config::new()
        .compile_fds(fds)
        .unwrap_or_else(|e| panic!("generating the message types: {e}"));
}
