#!/bin/bash
# The flight recorder on a real server (issue 40): Debian's H2 as a TCP
# server, recorded with `record --flight --pid` while 1 JDBC client updates
# the hot row for CALM s, then 8 clients for BURST s (benches/servers/HotRow.java).
# The trigger: 6 or more of H2's connection threads waiting at once (their
# comm is `H2 TCP Server (`), which the calm phase never reaches and the burst
# does at once; the default Java mode (the JVM's flight recorder keeps the
# window and the dump adds its waits). Prints the recorder's log and the dump's report.
#
# TRIGGER='convoy>=4 in H2 TCP*' (for example) replaces the trigger.
#
#   [TRIGGER=SPEC] bash benches/flight/h2_burst.sh [CALM] [BURST]
set -u
CALM=${1:-8}; BURST=${2:-8}
TRIGGER=${TRIGGER:-'waiting>=6 in H2 TCP*'}
J=/usr/lib/jvm/java-17-openjdk-amd64/bin
IF=${IDLEFLOW:-target/release/idleflow}
D=${DIR:-/tmp}; C=$D/h2client; OUT=$D/h2-flight; mkdir -p $C; rm -rf "$OUT"
[ $C/HotRow.class -nt benches/servers/HotRow.java ] || $J/javac -d $C benches/servers/HotRow.java
$J/java -cp /usr/share/java/h2.jar org.h2.tools.Server -tcp -tcpPort 9092 -ifNotExists > $D/h2.log 2>&1 &
for i in $(seq 120); do (echo > /dev/tcp/127.0.0.1/9092) 2>/dev/null && break; sleep 0.5; done
PID=$(pgrep -f org.h2.tools.Server | head -1)
$J/java -cp $C:/usr/share/java/h2.jar HotRow 4 5 > /dev/null          # warm-up, unrecorded
$IF record --flight 30s --pid "$PID" --trigger "$TRIGGER" \
    --tail 2s -o "$OUT" 2> $D/h2-flight.log &
REC=$!
sleep 3
T0=$(date +%s.%N)
$J/java -cp $C:/usr/share/java/h2.jar HotRow 1 "$CALM" | sed 's/^/calm:  /'
T1=$(date +%s.%N)
$J/java -cp $C:/usr/share/java/h2.jar HotRow 8 "$BURST" | sed 's/^/burst: /'
echo "burst began $(echo "$T1 - $T0" | bc) s after the calm phase began"
sleep 3
kill -INT $REC; wait $REC
pkill -TERM -f org.h2.tools.Server
cat $D/h2-flight.log
for f in "$OUT"/*.idleflow; do
    [ -e "$f" ] || continue
    echo "== $f ($(stat -c %s "$f") bytes, mode $(stat -c %a "$f"))"
    /usr/bin/time -f "report: %e s, %M KiB" $IF report "$f" | head -40
done
