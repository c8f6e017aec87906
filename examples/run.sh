#!/usr/bin/env bash
# The main job on the bundled example: build idleflow, record the dutycycle
# workload (a thread pinned to each CPU, 3 ms computing / 3 ms sleeping), and
# print the report. Run as root (recording needs root or CAP_PERFMON).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release            # idleflow and its JVM agent
cargo build --release --examples
./target/release/idleflow record -o run.idleflow -- ./target/release/examples/dutycycle --seconds 3
./target/release/idleflow report run.idleflow
