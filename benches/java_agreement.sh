#!/bin/bash
# The ground truth of the Java frames read from the JVMs' structures (`--java
# vm`, the default): each workload recorded once with both `--java vm` and
# the flight recorder of every wait (`--java vm,waits --wait-threshold 0`),
# then each wait the structures named is paired with the flight recorder's
# wait that holds its switch-out and their innermost five Java frames are
# compared, weighted by the wait's length
# (tracer/hotspot/examples/agreement.rs). The README's example, the test
# programs (examples/java) on JDK 17 and 25, then Tomcat and H2 under load
# (benches/servers/examples.sh). Run as root from the repository root after
# `cargo build --release --workspace --examples`.
# usage: java_agreement.sh [programs] [servers]      (default: both)
set -u
IF=${IDLEFLOW:-target/release/idleflow}
AG=${AGREEMENT:-target/release/examples/agreement}
D=${DIR:-/tmp/agreement}
J17=/usr/lib/jvm/java-17-openjdk-amd64/bin
J25=/usr/lib/jvm/temurin-25-jdk-amd64/bin
WHAT=${*:-programs servers}
OPTS="--java vm,waits --wait-threshold 0"
mkdir -p $D target/java
$J17/javac -d target/java examples/java/*.java
rec() {
  local name=$1; shift
  $IF record -q $OPTS -o $D/$name.idleflow -- "$@" > /dev/null
  echo "== $name: $*"
  $AG $D/$name.idleflow
}
for w in $WHAT; do
  case $w in
    programs)
      for j in 17 25; do
        J=$J17; [ $j = 25 ] && J=$J25
        rec lockedio-$j $J/java -cp target/java LockedIo 4 6
        for m in convoy lock handoff sleep socket; do
          rec waits-$m-$j $J/java -cp target/java Waits $m 5
        done
        rec holders-$j $J/java -cp target/java Holders chain3 5
      done
      ;;
    servers)
      RECORD_OPTS="$OPTS" DIR=$D SHOWN=0 IDLEFLOW=$IF bash benches/servers/examples.sh tomcat h2 > /dev/null
      for s in tomcat h2; do
        echo "== $s (benches/servers/examples.sh, --pid under load)"
        $AG $D/example-$s.idleflow
      done
      ;;
  esac
done
