#!/usr/bin/env bash
# The main job on the bundled examples. Run as root (recording needs root or
# CAP_PERFMON). Installs what a fresh machine lacks (.ci/install examples),
# builds idleflow and its JVM agent, then records, in the mode a user starts
# with first:
#  1. a Java program whose workers are serialized on one lock held across a
#     blocking call (examples/java/LockedIo.java) in the default mode (no
#     instrumentation: the JVM's flight recorder for the long waits, the
#     stacks at the switch-outs with the JIT frames named for the short
#     ones): the report and the flame graph waits.svg;
#  2. the same program with the entry/exit agent (--java tree, slow: the
#     arcflow call tree): the report with its tree and idle.svg;
#  3. native programs: a duty-cycle workload; a program without frame
#     pointers whose wait has a known call path (chain.svg); a chain of
#     lock holders, followed to its root cause (blame.svg).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install examples        # what a fresh machine lacks: clang, libelf-dev, a JDK...
cargo build --release            # idleflow and libidleflow_agent.so beside it
cargo build --release --examples
mkdir -p target/java
/usr/lib/jvm/java-17-openjdk-amd64/bin/javac -d target/java examples/java/*.java
# 1. The default mode: one answer, the Java frames and reasons.
./target/release/idleflow record -o waits.idleflow -- \
    /usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp target/java LockedIo 4 6
./target/release/idleflow report waits.idleflow
./target/release/idleflow flamegraph waits.idleflow -o waits.svg
echo "flame graph of the merged idle-causing paths, the JVM's reason on top: waits.svg"
# 2. The same program with the entry/exit agent: the arcflow call tree.
./target/release/idleflow record --java tree -o run.idleflow -- \
    /usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp target/java LockedIo 4 3
./target/release/idleflow report run.idleflow --view tree --threads 10
./target/release/idleflow flamegraph run.idleflow -o idle.svg
echo "flame graph of the merged idle-causing paths (the tree's Java frames over the native ones): idle.svg"
./target/release/idleflow record -o dutycycle.idleflow -- ./target/release/examples/dutycycle --seconds 2
./target/release/idleflow report dutycycle.idleflow --threads 5
# A native program built without frame pointers whose worker blocks in a
# chain of named functions ending in libc's read on a pipe: its user stack at
# each switch-out that left a CPU idle, unwound by CFI when the recording
# ended, with the kernel's wait under it.
cc -O2 -fomit-frame-pointer -g -pthread -o target/chain examples/c/chain.c
./target/release/idleflow record -o chain.idleflow -- target/chain 2000
./target/release/idleflow report chain.idleflow --threads 5 --paths 2
./target/release/idleflow flamegraph chain.idleflow -o chain.svg
echo "flame graph of the idle-causing call paths (user frames, kernel frames on top): chain.svg"
# Who held things up: handlers convoy on a mutex held by an indexer that
# waits, still holding it, for a mutex held by a writer sleeping in
# commit_batch() (examples/c/holders.c). At the default stacks, the
# report's "Root causes of idle" follows each idle interval down that chain
# to the writer's sleep (its frames and release site from the sampled
# wake-ups); the blame flame graph draws it.
cc -O2 -fomit-frame-pointer -g -pthread -o target/holders examples/c/holders.c
./target/release/idleflow record -o holders.idleflow -- target/holders chain3 4
./target/release/idleflow report holders.idleflow --threads 5 --paths 3
./target/release/idleflow flamegraph holders.idleflow --blame -o blame.svg
echo "flame graph of the wait chains, the threads that left CPUs idle at the bottom, the root causes on top: blame.svg"
