#!/bin/bash
# Two idleflow builds on one workload, interleaved (issue 30's open question: what mimalloc
# as the global allocator changed in the recorder's own cost). Build B with the
# `#[global_allocator]` lines of src/main.rs removed and copy each binary aside first.
# usage: alloc.sh IDLEFLOW_A IDLEFLOW_B [REPS]   prints per run: build, wall s of
#   `perf bench sched messaging -l 200` under `record -q`, the recorder's CPU ms, lost records
set -eu
A=$1; B=$2; REPS=${3:-5}
T=$(mktemp -d); trap 'rm -rf $T' EXIT
W="perf bench sched messaging -l 200"
for i in $(seq $REPS); do
  /usr/bin/time -f "%e" -o $T/t $W > /dev/null 2>&1; echo "plain $(cat $T/t) - -"
  for b in "$A" "$B"; do
    /usr/bin/time -f "%e" -o $T/t "$b" record -q -o $T/r.idleflow -- $W > /dev/null 2>&1
    "$b" report --format json $T/r.idleflow 2>/dev/null > $T/r.json
    echo "$(basename "$b") $(cat $T/t) $(python3 -c 'import json; r=json.load(open("'$T'/r.json")); print(round(r["tool"]["runtime_ns"]/1e6), r["lost_events"])')"
  done
done | awk '{ print; t[$1] = t[$1] " " $2; c[$1] = c[$1] " " $3; l[$1] += ($4 == "-" ? 0 : $4) }
            END { for (k in t) printf "%-18s wall s:%s | recorder ms:%s | lost %d\n", k, t[k], c[k], l[k] }'
