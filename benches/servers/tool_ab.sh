#!/bin/bash
# Run from the repository root after `cargo build --release`.
# usage: tool_ab.sh ROUNDS BIN...   idleflow binaries' own CPU on one running Tomcat under ab -c 4 -k:
# per round and binary, record --no-agent --pid for 11 s around a 10 s load window; prints tool CPU, ns per kernel record (2 a dispatch + 1 a wake-up)
ROUNDS=$1; shift
export CATALINA_HOME=/usr/share/tomcat10 CATALINA_BASE=/var/lib/tomcat10 CATALINA_TMPDIR=/tmp JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
URL=http://127.0.0.1:8080/examples/servlets/servlet/HelloWorldExample
$CATALINA_HOME/bin/catalina.sh run > /tmp/catalina.log 2>&1 &
for i in $(seq 240); do curl -sf $URL >/dev/null 2>&1 && break; sleep 0.5; done
PID=$(pgrep -f org.apache.catalina.startup.Bootstrap | head -1)
ab -t 20 -n 100000000 -c 4 -k $URL >/dev/null 2>&1
for r in $(seq $ROUNDS); do for b in "$@"; do
  $b record -q --no-agent --pid $PID --duration 11 -o /tmp/ab.idleflow $EXTRA & REC=$!
  sleep 0.5
  rps=$(ab -t 10 -n 100000000 -c 4 -k $URL 2>&1 | awk '/Requests per second/ {print $4}')
  wait $REC
  $b report --format json /tmp/ab.idleflow | python3 -c '
import json,sys; r=json.load(sys.stdin); t=r["tool"]; recs=2*r["dispatches"]+r["wakeups"]
print("'$(basename $b)' rps '$rps' tool %.2f %% of one CPU, %.0f ns/record, %d records/s, wakeups %.3f %%" % (t["cpu_pct_of_one"], t["runtime_ns"]/recs, recs/(r["duration_ns"]/1e9), t["wakeups_pct"]))'
done; done
pkill -TERM -f org.apache.catalina.startup.Bootstrap; wait
