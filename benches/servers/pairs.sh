#!/bin/bash
# Run from the repository root after `cargo build --release --examples`; DIR (default /tmp) holds the files.
# usage: [MODE=noagent|waits] pairs.sh N   Tomcat plain vs record in MODE (default noagent), N pairs, 15 s warm-up + 15 s measured each
for i in $(seq $1); do
  p=$(benches/servers/tomcat.sh plain /dev/null 15 15 | grep "Requests per second" | awk '{print $4}')
  n=$(benches/servers/tomcat.sh ${MODE:-noagent} ${DIR:-/tmp}/pair.idleflow 15 15 | grep "Requests per second" | awk '{print $4}')
  t=$(${IDLEFLOW:-target/release/idleflow} report --format json ${DIR:-/tmp}/pair.idleflow | python3 -c 'import json,sys; r=json.load(sys.stdin); t=r["tool"]; print(round(t["cpu_pct_of_one"],2), round(t["wakeups_pct"],3), r["lost_events"])')
  echo "| $i | $p | $n | $(python3 -c "print(round($n/$p,3))") | $t |"
done
