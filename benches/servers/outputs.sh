#!/bin/bash
# Every output of one recording, timed against `report` (issue 30: at least as fast, memory
# bounded by distinct paths): report, report --format html, export pprof, export perfetto,
# history add, diff with itself; then go tool pprof's top path against the report's.
# usage: outputs.sh RECORDING [REPS]   (from the repository root, after cargo build --release)
set -eu
REC=$1; REPS=${2:-3}
IF=${IDLEFLOW:-target/release/idleflow}
T=$(mktemp -d); trap 'rm -rf $T' EXIT
run() { # name, command...: "name seconds max-RSS-KiB"
  local name=$1; shift
  /usr/bin/time -f "%e %M" -o $T/time "$@" > /dev/null 2>&1
  echo "$name $(cat $T/time)"
}
for i in $(seq $REPS); do
  run report $IF report "$REC"
  run html $IF report "$REC" --format html -o $T/r.html
  run pprof $IF export "$REC" --format pprof -o $T/idle.pb.gz
  run perfetto $IF export "$REC" --format perfetto -o $T/idle.pftrace
  run history-add $IF history add "$REC" --job bench --history $T/h.sqlite
  run diff $IF diff "$REC" "$REC"
done | awk '{ t[$1] = t[$1] " " $2; m[$1] = ($3 > m[$1] ? $3 : m[$1]) }
            END { for (k in t) printf "%-12s seconds:%s  max RSS %.0f MiB\n", k, t[k], m[k] / 1024 }' | sort
ls -l $T/r.html $T/idle.pb.gz $T/idle.pftrace | awk '{ printf "%s %.1f MiB\n", $NF, $5 / 1048576 }'
echo "report's top path:"
$IF report "$REC" | sed -n 2p
echo "go tool pprof -top (flat = the innermost frame; -traces has the whole paths):"
go tool pprof -top -nodecount=3 $T/idle.pb.gz 2>/dev/null | tail -4
