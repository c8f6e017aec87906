#!/bin/bash
# Run from the repository root after `cargo build --release --examples`; DIR (default /tmp) holds the files.
# usage: [REPS=N] saturate.sh PAIRS...   N times (default 2) handoff 3 s: plain, idleflow (defaults), perf (same events, defaults)
IF=${IDLEFLOW:-target/release/idleflow}
H=${HANDOFF:-target/release/examples/handoff}
for p in "$@"; do
  for rep in $(seq ${REPS:-2}); do
    plain=$($H --pairs $p --seconds 3 | awk '{print $4}')
    out=$($IF record -q -o ${DIR:-/tmp}/s.idleflow -- $H --pairs $p --seconds 3 | awk '{print $4}')
    ifs=$($IF report --format json ${DIR:-/tmp}/s.idleflow | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["dispatches"], r["lost_events"], round(r["tool"]["runtime_ns"]/1e6))')
    pout=$(perf record -q -e sched:sched_switch,sched:sched_wakeup,sched:sched_wakeup_new --switch-events -a -o ${DIR:-/tmp}/s.data -- $H --pairs $p --seconds 3 2>${DIR:-/tmp}/perf.err | awk '{print $4}')
    pst=$(perf report -i ${DIR:-/tmp}/s.data --stats 2>/dev/null)
    plost=$(perf report -D -i ${DIR:-/tmp}/s.data 2>/dev/null | grep "PERF_RECORD_LOST" | grep -o "lost:[0-9]*" | awk -F: '{s+=$2} END {print s+0}')
    pall=$(echo "$pst" | grep -m1 "TOTAL events" | awk '{print $3}')
    read d l t <<< "$ifs"
    echo "| $((2*p)) | $rep | $plain | $out | $d | $l | $t | $pout | ${plost:-0} of $pall |"
  done
done
