#!/bin/bash
# Run from the repository root after `cargo build --release`; DIR (default /tmp) holds the files.
# usage: h2.sh MODE [OUT] [WARM_S] [MEASURE_S]   MODE: plain | noagent | waits (WT=MS: --wait-threshold, else the default)
# Debian's H2 (libh2-java) as a TCP server on 127.0.0.1:9092; 4 JDBC clients update one hot row
# (benches/servers/HotRow.java), outside the recording; prints `updates/s N`.
set -u
MODE=$1; OUT=${2:-${DIR:-/tmp}/h2.idleflow}; WARM=${3:-5}; MEAS=${4:-15}
J=/usr/lib/jvm/java-17-openjdk-amd64/bin
IF=${IDLEFLOW:-target/release/idleflow}
D=${DIR:-/tmp}/h2client; mkdir -p $D
[ $D/HotRow.class -nt benches/servers/HotRow.java ] || $J/javac -d $D benches/servers/HotRow.java
SERVER="$J/java -cp /usr/share/java/h2.jar org.h2.tools.Server -tcp -tcpPort 9092 -ifNotExists"
case $MODE in
  plain)   $SERVER > ${DIR:-/tmp}/h2.log 2>&1 & ;;
  noagent) $IF record -q --no-agent -o "$OUT" -- $SERVER > ${DIR:-/tmp}/h2.log 2>&1 & ;;
  waits)   $IF record -q ${WT:+--wait-threshold $WT} ${RECORD_FLAGS:-} -o "$OUT" -- $SERVER > ${DIR:-/tmp}/h2.log 2>&1 & ;;
esac
for i in $(seq 120); do (echo > /dev/tcp/127.0.0.1/9092) 2>/dev/null && break; sleep 0.5; done
$J/java -cp $D:/usr/share/java/h2.jar HotRow 4 $WARM > /dev/null
$J/java -cp $D:/usr/share/java/h2.jar HotRow 4 $MEAS
pkill -TERM -f org.h2.tools.Server
wait
