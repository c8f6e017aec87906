#!/bin/bash
# The flight recorder on Tomcat in a load burst (issue 40): Debian's Tomcat 10
# serving the HelloWorld servlet on 127.0.0.1, recorded with `record --flight
# 30s --pid TOMCAT`, while one client asks a request every 10 ms for CALM s
# (the connector's pool stays at its 10 spare threads), then `ab -c 64 -k` for
# BURST s (the pool grows toward 64 threads, and those not serving wait).
# The trigger: more connector threads waiting at once than the calm pool has
# threads, which only a burst reaches. The default Java mode (the JVM's flight
# recorder keeps the window and the dump adds its waits). Prints the phases'
# figures, the recorder's log and each dump's report.
#
# TRIGGER=SPEC replaces the trigger; needs tomcat10, tomcat10-examples and
# apache2-utils (`ab`).
#
#   [TRIGGER=SPEC] bash benches/flight/tomcat_burst.sh [CALM] [BURST]
set -u
CALM=${1:-8}; BURST=${2:-8}
TRIGGER=${TRIGGER:-'waiting>=16 in http-nio-8080-exec-*'}
IF=${IDLEFLOW:-$PWD/target/release/idleflow}
D=${DIR:-/tmp}; OUT=$D/tomcat-burst; rm -rf "$OUT"
export CATALINA_HOME=/usr/share/tomcat10 CATALINA_BASE=/var/lib/tomcat10 CATALINA_TMPDIR=/tmp
export JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
URL=http://127.0.0.1:8080/examples/servlets/servlet/HelloWorldExample
$CATALINA_HOME/bin/catalina.sh run > $D/catalina.log 2>&1 &
for i in $(seq 240); do curl -sf $URL >/dev/null 2>&1 && break; sleep 0.5; done
curl -sf $URL > /dev/null || { echo "Tomcat does not serve $URL (tomcat10-examples?)"; exit 1; }
PID=$(pgrep -f org.apache.catalina.startup.Bootstrap | head -1)
# Warm-up, unrecorded: 4 clients keep the pool at its 10 spare threads.
ab -t 10 -n 100000000 -c 4 -k $URL > /dev/null 2>&1
pool() { ls /proc/$PID/task | while read t; do cat /proc/$PID/task/$t/comm; done 2>/dev/null \
    | grep -c '^http-nio-8080-e'; }
echo "connector threads before: $(pool)"
$IF record --flight 30s --pid "$PID" --trigger "$TRIGGER" --tail 2s -o "$OUT" \
    2> $D/tomcat-burst.log &
REC=$!
for i in $(seq 100); do [ -S /run/idleflow/flight-$REC.sock ] && break; sleep 0.1; done
sleep 2
T0=$(date +%s.%N)
end=$(( $(date +%s) + CALM )); n=0
while [ "$(date +%s)" -lt $end ]; do curl -sf $URL > /dev/null; n=$((n + 1)); sleep 0.01; done
echo "calm: $n requests in $CALM s, connector threads $(pool)"
T1=$(date +%s.%N)
echo "burst: $(ab -t "$BURST" -n 100000000 -c 64 -k $URL 2>/dev/null \
    | awk '/Requests per second/ {print $4}') requests/s, connector threads $(pool)"
echo "burst began $(echo "$T1 - $T0" | bc) s after the calm phase began"
sleep 3
kill -INT $REC; wait $REC
pkill -TERM -f org.apache.catalina.startup.Bootstrap; sleep 2
cat $D/tomcat-burst.log
for f in "$OUT"/*.idleflow; do
    [ -e "$f" ] || continue
    echo "== $f ($(stat -c %s "$f") bytes, mode $(stat -c %a "$f"))"
    /usr/bin/time -f "report: %e s, %M KiB" $IF report "$f" 2>&1 | head -${SHOWN:-40}
done
