#!/bin/bash
# Run from the repository root after `cargo build --release`; DIR (default /tmp) holds the files.
# usage: costs.sh [OPTIONS...]     each argument one option set ("" = the default), e.g.
#        bash benches/servers/costs.sh "" "--no-waker-stacks" "--no-stacks" "" "--no-waker-stacks" "--no-stacks"
#
# What each kind of record costs on a loopback server: one H2 server life
# (hot row, benches/servers/HotRow.java, 4 clients), warmed up once; for
# each option set in turn, `idleflow record --no-agent OPTS --pid` for 10 s
# around an 8 s load, then the recording's own `# recording cost` line (the
# eBPF programs' ns a run and share of one CPU, timed by the kernel a tenth
# of every second, and idleflow's threads). Repeat an option set to see the
# spread; throughput is printed too but says little in one window.
set -u
D=${DIR:-/tmp}; J=/usr/lib/jvm/java-17-openjdk-amd64/bin; IF=${IDLEFLOW:-target/release/idleflow}
mkdir -p $D/h2client
[ $D/h2client/HotRow.class -nt benches/servers/HotRow.java ] || $J/javac -d $D/h2client benches/servers/HotRow.java
$J/java -cp /usr/share/java/h2.jar org.h2.tools.Server -tcp -tcpPort 9092 -ifNotExists > $D/h2.log 2>&1 &
SRV=$!
for i in $(seq 120); do (echo > /dev/tcp/127.0.0.1/9092) 2>/dev/null && break; sleep 0.5; done
PID=$(pgrep -f org.h2.tools.Server | head -1)
load() { $J/java -cp $D/h2client:/usr/share/java/h2.jar HotRow 4 $1 | awk '/updates\/s/ {print $2}'; }
echo "warm-up: $(load 10) updates/s"
i=0
for A in "$@"; do
  i=$((i+1))
  $IF record -q --no-agent $A --pid $PID --duration 10 -o $D/cost$i.idleflow &
  REC=$!; sleep 1
  v=$(load 8); wait $REC
  echo "[$A] $v updates/s: $($IF report $D/cost$i.idleflow 2>&1 | grep -E 'recording cost')"
done
kill $SRV; sleep 2; kill -9 $SRV 2>/dev/null; wait
