#!/bin/bash
# The first screen of the default report on three real servers under load,
# recorded as their users would: the server running and warmed up, its load
# running, then `idleflow record --pid PID --duration WINDOW` (the default
# mode, no option). Writes DIR/example-{tomcat,h2,postgres}.idleflow and
# prints the first N lines of each report (docs/examples.md shows them).
# Run as root from the repository root after `cargo build --release`.
# usage: examples.sh [tomcat] [h2] [postgres]      (default: all three)
# RECORD_OPTS adds options to `record` (`--java vm`: Java frames from the
# JVMs' own structures); DIR is where the recordings go (default /tmp).
set -u
N=${SHOWN:-20}; W=${WINDOW:-10}
IF=${IDLEFLOW:-target/release/idleflow}
D=${DIR:-/tmp}
J=/usr/lib/jvm/java-17-openjdk-amd64/bin
SERVERS=${*:-tomcat h2 postgres}
# Records PID for W seconds while the load (the rest of the arguments) runs,
# started 2 s before the window and ending 2 s after it.
record_under_load() {
  local pid=$1 out=$2; shift 2
  "$@" > $D/example-load.log 2>&1 &
  local load=$!
  sleep 2
  $IF record -q ${RECORD_OPTS:-} --pid $pid --duration $W -o $out
  wait $load
}
show() {
  echo "== $1: \`idleflow report $2\` ($($IF report $2 | wc -l) lines), its first $N:"
  $IF report $2 | head -$N
  echo
}
for s in $SERVERS; do
  case $s in
    tomcat)
      export CATALINA_HOME=/usr/share/tomcat10 CATALINA_BASE=/var/lib/tomcat10 CATALINA_TMPDIR=/tmp
      export JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
      URL=http://127.0.0.1:8080/examples/servlets/servlet/HelloWorldExample
      $CATALINA_HOME/bin/catalina.sh run > $D/catalina.log 2>&1 &
      for i in $(seq 240); do curl -sf $URL >/dev/null 2>&1 && break; sleep 0.5; done
      PID=$(pgrep -f org.apache.catalina.startup.Bootstrap | head -1)
      ab -t 20 -n 100000000 -c 4 -k $URL > /dev/null 2>&1
      record_under_load $PID $D/example-tomcat.idleflow ab -t $((W + 4)) -n 100000000 -c 4 -k $URL
      pkill -TERM -f org.apache.catalina.startup.Bootstrap
      show "Tomcat 10, ab -c 4 -k HelloWorld" $D/example-tomcat.idleflow
      ;;
    h2)
      mkdir -p $D/h2client
      [ $D/h2client/HotRow.class -nt benches/servers/HotRow.java ] || $J/javac -d $D/h2client benches/servers/HotRow.java
      $J/java -cp /usr/share/java/h2.jar org.h2.tools.Server -tcp -tcpPort 9092 -ifNotExists > $D/h2.log 2>&1 &
      for i in $(seq 120); do (echo > /dev/tcp/127.0.0.1/9092) 2>/dev/null && break; sleep 0.5; done
      PID=$(pgrep -f org.h2.tools.Server | head -1)
      $J/java -cp $D/h2client:/usr/share/java/h2.jar HotRow 4 10 > /dev/null
      record_under_load $PID $D/example-h2.idleflow $J/java -cp $D/h2client:/usr/share/java/h2.jar HotRow 4 $((W + 4))
      pkill -TERM -f org.h2.tools.Server
      show "H2 TCP server, 4 JDBC clients updating one hot row" $D/example-h2.idleflow
      ;;
    postgres)
      BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
      P=$D/pg
      as_pg() { setpriv --reuid=postgres --regid=postgres --clear-groups "$@"; }
      if [ ! -d $P/data ]; then
        mkdir -p $P && chown postgres $P
        as_pg $BIN/initdb -A trust -U postgres -D $P/data > /dev/null
      fi
      as_pg $BIN/pg_ctl -D $P/data -l $P/log -o "-p 5499 -k $P -c listen_addresses=127.0.0.1" -w start > /dev/null
      as_pg $BIN/pgbench -h 127.0.0.1 -p 5499 -U postgres -i -s 5 postgres > /dev/null 2>&1
      PM=$(head -1 $P/data/postmaster.pid)
      record_under_load $PM $D/example-postgres.idleflow \
        as_pg $BIN/pgbench -h 127.0.0.1 -p 5499 -U postgres -c 8 -j 2 -T $((W + 4)) postgres
      as_pg $BIN/pg_ctl -D $P/data -m fast -w stop > /dev/null
      show "PostgreSQL 15, pgbench -c 8 -j 2" $D/example-postgres.idleflow
      ;;
    *) echo "usage: $0 [tomcat] [h2] [postgres]" >&2; exit 2 ;;
  esac
done
wait 2>/dev/null
