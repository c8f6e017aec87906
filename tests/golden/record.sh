#!/usr/bin/env bash
# Makes the golden corpus of tests/golden.rs: a few small recordings that
# exercise every source (native user stacks, the default Java mode, the
# entry/exit agent's tree, blame chains, blocking stacks, a diff pair).
# Run once, as root, from the repository's root after `cargo build --release
# --examples`; the recordings are committed and never re-made by the tests
# (their outputs are what tests/golden.rs pins down: see its module doc).
# Re-make them only when the recording format changes, then re-bless:
#   IDLEFLOW_BLESS=1 cargo test --release --test golden
set -euo pipefail
cd "$(dirname "$0")/../.."
out=tests/golden/recordings
mkdir -p "$out" target/golden target/java
idleflow=${IDLEFLOW:-./target/release/idleflow}
java=/usr/lib/jvm/java-17-openjdk-amd64/bin/java
/usr/lib/jvm/java-17-openjdk-amd64/bin/javac -d target/java examples/java/*.java
for c in chain holders stages; do
    cc -O2 -fomit-frame-pointer -g -pthread -o target/golden/$c examples/c/$c.c
done
rec() { "$idleflow" record -q -o "$out/$1.idleflow" "${@:2}"; }
# Native: a worker blocked in named functions ending in read(), CFI-unwound.
rec chain -- target/golden/chain 500
# Blame: handlers convoy on a mutex held by an indexer waiting for a writer.
rec holders -- target/golden/holders chain3 2
# The same with every blocking switch-out's stack (the blocking view).
rec holders-waits --stacks waits -- target/golden/holders chain3 1
# Java, the default mode (flight-recorder waits, switch-out stacks).
rec waits -- "$java" -cp target/java LockedIo 4 2
# Java, the entry/exit agent's arcflow tree.
rec tree --java tree -- "$java" -cp target/java LockedIo 2 2
# A diff pair: flush_log sleeping 300 µs, then 900 µs.
rec stages-base -- target/golden/stages 1 300
rec stages-slower -- target/golden/stages 1 900
ls -l "$out"
