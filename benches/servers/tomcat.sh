#!/bin/bash
# Run from the repository root after `cargo build --release --examples`; DIR (default /tmp) holds the files.
# usage: tomcat.sh MODE [OUT] [WARM_S] [MEASURE_S]   MODE: plain | noagent | waits (the default Java mode; WT=MS: --wait-threshold, else the default) | tree (the entry/exit agent)
set -u
MODE=$1; OUT=${2:-${DIR:-/tmp}/t.idleflow}; WARM=${3:-15}; MEAS=${4:-15}
export CATALINA_HOME=/usr/share/tomcat10 CATALINA_BASE=/var/lib/tomcat10 CATALINA_TMPDIR=/tmp
export JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
IF=${IDLEFLOW:-target/release/idleflow}
URL=http://127.0.0.1:8080/examples/servlets/servlet/HelloWorldExample
case $MODE in
  plain)   $CATALINA_HOME/bin/catalina.sh run > ${DIR:-/tmp}/catalina.log 2>&1 & ;;
  noagent) $IF record -q --no-agent -o "$OUT" -- $CATALINA_HOME/bin/catalina.sh run > ${DIR:-/tmp}/catalina.log 2>&1 & ;;
  waits)   $IF record -q ${WT:+--wait-threshold $WT} ${RECORD_FLAGS:-} -o "$OUT" -- $CATALINA_HOME/bin/catalina.sh run > ${DIR:-/tmp}/catalina.log 2>&1 & ;;
  tree|agent) $IF record -q --java tree -o "$OUT" -- $CATALINA_HOME/bin/catalina.sh run > ${DIR:-/tmp}/catalina.log 2>&1 & ;;
esac
for i in $(seq 240); do curl -sf $URL >/dev/null 2>&1 && break; sleep 0.5; done
ab -q -t $WARM -n 100000000 -c 4 -k $URL > /dev/null 2>&1
ab -t $MEAS -n 100000000 -c 4 -k $URL 2>&1 | grep -E "Requests per second|Complete requests"
pkill -TERM -f org.apache.catalina.startup.Bootstrap
wait
