#!/bin/bash
# The flight recorder on Tomcat 10 (issue 40): Debian's Tomcat serving the
# HelloWorld servlet to `ab -k` on 127.0.0.1. After a warm-up, ROUNDS rounds
# of `ab -c 4` for SECS s alternate plain and under `record --flight 60s
# --pid TOMCAT` (its triggers: 9 of the 10 connector threads waiting for 500 ms,
# and half the CPUs idle for 1 s while 4 of them wait); in each recorded round
# `idleflow trigger`
# asks for a dump half-way (each measured SECS after SECS of the load, to
# leave the recorder's start out). Then a light load (`ab -c 1`, a request every
# 20 ms) under the flight recorder, where the pool sits waiting: the
# `waiting>=9 for 500ms` trigger fires. Prints requests/s per round, the
# recorder's log and the first lines of each dump's report.
#
#   bash benches/flight/tomcat.sh [ROUNDS] [SECS]
set -u
ROUNDS=${1:-3}; SECS=${2:-10}
IF=${IDLEFLOW:-$PWD/target/release/idleflow}
D=${DIR:-/tmp}; OUT=$D/tomcat-flight; rm -rf "$OUT"
export CATALINA_HOME=/usr/share/tomcat10 CATALINA_BASE=/var/lib/tomcat10 CATALINA_TMPDIR=/tmp
export JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
URL=http://127.0.0.1:8080/examples/servlets/servlet/HelloWorldExample
$CATALINA_HOME/bin/catalina.sh run > $D/catalina.log 2>&1 &
for i in $(seq 240); do curl -sf $URL >/dev/null 2>&1 && break; sleep 0.5; done
PID=$(pgrep -f org.apache.catalina.startup.Bootstrap | head -1)
rps() { ab -t "$1" -n 100000000 -c "$2" -k $URL 2>/dev/null | awk '/Requests per second/ {print $4}'; }
echo "warm-up: $(rps 20 4) requests/s"
fly() {
  $IF record --flight 60s --pid "$PID" --tail 1s --cooldown 5s \
      --trigger 'waiting>=9 for 500ms in http-nio-8080-exec-*' \
      --trigger 'idle>=50% for 1s while waiting>=4 in http-nio-8080-exec-*' \
      -o "$OUT" 2>> $D/tomcat-flight.log &
  REC=$!
  for i in $(seq 100); do [ -S /run/idleflow/flight-$REC.sock ] && break; sleep 0.1; done
}
: > $D/tomcat-flight.log
# Each round's measured SECS follow SECS of the same load unmeasured: the
# flight recorder's start (JFR started through the attach redefines classes
# and throws their compiled code away) is paid once by an always-on recorder.
for r in $(seq "$ROUNDS"); do
  rps "$SECS" 4 > /dev/null
  echo "round $r plain: $(rps "$SECS" 4) requests/s"
  fly
  rps "$SECS" 4 > /dev/null
  ( sleep $((SECS / 2)); $IF trigger --pid $REC > /dev/null ) &
  echo "round $r flight: $(rps "$SECS" 4) requests/s"
  wait $!; sleep 1.5; kill -INT $REC; wait $REC
done
fly; sleep 2
# A light load: a request every 20 ms, the pool of 10 waiting.
end=$((SECONDS + 6)); n=0
while [ $SECONDS -lt $end ]; do curl -sf $URL > /dev/null; n=$((n + 1)); sleep 0.02; done
echo "light load: $n requests in 6 s"
sleep 1.5; kill -INT $REC; wait $REC
pkill -TERM -f org.apache.catalina.startup.Bootstrap; sleep 2
cat $D/tomcat-flight.log
for f in "$OUT"/*.idleflow; do
  [ -e "$f" ] || continue
  echo "== $f ($(stat -c %s "$f") bytes, mode $(stat -c %a "$f"))"
  /usr/bin/time -f "report: %e s, %M KiB" $IF report "$f" 2>&1 | head -${SHOWN:-12}
done
