#!/bin/bash
# Run from the repository root after `cargo build --release`.
# usage: first_dispatch.sh [RUNS]      (default 5; IDLEFLOW, DIR as elsewhere)
#
# How soon `idleflow record --pid PID` records: for a running JVM (`Waits
# convoy`, started 3 s before, so that it is warm), the wall-clock time from
# the command's start to the recording's first dispatch of one of the JVM's
# threads (start_unix_ns + that dispatch's time - start_ns, from `script`),
# and to the first one whose Java frames were walked (a `jstack` record).
# Each run once in the default mode (the JVM's own structures) and once with
# `--java waits,stacks` (the flight recorder started through the attach
# mechanism), interleaved; prints one row per run and the medians.
set -u
RUNS=${1:-5}
IF=${IDLEFLOW:-target/release/idleflow}
D=${DIR:-/tmp}
J=/usr/lib/jvm/java-17-openjdk-amd64/bin
mkdir -p target/java "$D"
[ target/java/Waits.class -nt examples/java/Waits.java ] || $J/javac -d target/java examples/java/*.java
$J/java -cp target/java Waits convoy 600 > /dev/null 2>&1 &
JVM=$!
sleep 3
first() { # REC T0: ms from T0 to the first dispatch of the JVM's threads, and to its first walked stack
  $IF script "$1" 2>/dev/null | python3 -c '
import sys, json, subprocess
rec, t0, jvm = sys.argv[1], int(sys.argv[2]), sys.argv[3]
head = json.loads(subprocess.run([sys.argv[4], "report", "--format", "json", rec], capture_output=True, text=True).stdout)
tids = {str(t["tid"]) for t in head["threads"] if str(t.get("pid")) == jvm}
first = walked = None
for line in sys.stdin:
    f = line.split()
    if len(f) < 5 or not f[0][0].isdigit():
        continue
    t = float(f[0])
    if first is None and f[3] == "dispatch" and (f[4] in tids or (len(f) > 7 and f[7] in tids)):
        first = t
    if walked is None and f[3] in ("jstack", "wjstack"):
        walked = t
    if first is not None and walked is not None:
        break
at = lambda rel: "-" if rel is None else "%.0f" % ((head["start_unix_ns"] + rel * 1e9 - t0) / 1e6)
print(at(first), at(walked))
' "$1" "$2" "$JVM" "$IF"
}
echo "| run | default: first dispatch ms | first walked stack ms | --java waits,stacks: first dispatch ms |"
echo "|---|---|---|---|"
A=(); B=(); C=()
for r in $(seq "$RUNS"); do
  t0=$(date +%s%N); $IF record -q --pid $JVM --duration 2 -o $D/first-vm.idleflow; read a b < <(first $D/first-vm.idleflow $t0)
  t0=$(date +%s%N); $IF record -q --java waits,stacks --pid $JVM --duration 2 -o $D/first-jfr.idleflow; read c _ < <(first $D/first-jfr.idleflow $t0)
  echo "| $r | $a | $b | $c |"
  A+=($a); B+=($b); C+=($c)
done
kill $JVM 2>/dev/null
med() { printf '%s\n' "$@" | grep -v -- - | sort -n | awk '{v[NR]=$1} END {print (NR ? v[int((NR+1)/2)] : "-")}'; }
echo "medians: default first dispatch $(med "${A[@]}") ms, first walked stack $(med "${B[@]}") ms; --java waits,stacks first dispatch $(med "${C[@]}") ms"
