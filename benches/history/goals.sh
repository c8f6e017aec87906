#!/usr/bin/env bash
# The history check's goals (issue 30), measured on examples/c/stages.c:
#  - false alarms: PAIRS pairs of identical runs (flush_log 300 µs): a history
#    of the first, `history check` of the second; every path it flags counts.
#  - detection: the same histories checked against a run whose flush_log
#    sleeps SHIFT_US µs (default 550: ≈ +2 points of the idle's share, measured and shown
#    per pair by `diff`): caught when flush_log's path is among those that rose.
# Runs are interleaved (base, same, shifted) so that the VM's drift hits all
# three alike. With HISTORY_RUNS=K (default 1: pairs), each history holds the
# K newest base runs (K-1 recorded first, then one per pair), so that the
# check also measures the spread between runs.
# Usage: sudo [HISTORY_RUNS=K] benches/history/goals.sh [PAIRS] [SHIFT_US]
set -euo pipefail
cd "$(dirname "$0")/../.."
pairs=${1:-20}
shift_us=${2:-550}
bin=target/release/idleflow
[ -x "$bin" ] || cargo build --release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -pthread -g -o "$work/stages" examples/c/stages.c
k=${HISTORY_RUNS:-1}
bases=()
for j in $(seq 2 "$k"); do
  "$bin" record -q -o "$work/pre$j.idleflow" -- "$work/stages" 2 300
  bases+=("$work/pre$j.idleflow")
done
false_alarms=0
caught=0
shifts=()
for i in $(seq 1 "$pairs"); do
  "$bin" record -q -o "$work/base$i.idleflow" -- "$work/stages" 2 300
  bases+=("$work/base$i.idleflow")
  "$bin" record -q -o "$work/same.idleflow" -- "$work/stages" 2 300
  "$bin" record -q -o "$work/shifted.idleflow" -- "$work/stages" 2 "$shift_us"
  h="$work/h$i.sqlite"
  for b in "${bases[@]: -$k}"; do
    "$bin" history add "$b" --job stages --history "$h" 2>/dev/null
  done
  set +e
  "$bin" history check "$work/same.idleflow" --job stages --history "$h" --format json > "$work/same.json"
  "$bin" history check "$work/shifted.idleflow" --job stages --history "$h" --format json > "$work/shifted.json"
  set -e
  flagged=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["rose"]))' "$work/same.json")
  read -r hit shift < <(python3 - "$work/shifted.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
def flush(x):
    i = x.get("program_frame")
    return i is not None and x["frames"][i]["name"] == "flush_log"
hit = any(flush(r) for r in c["rose"])
shift = [x["change_pts"] for x in c["diff"]["changes"] + c["diff"]["within_noise"] if flush(x)]
print(int(hit), f"{shift[0]:+.2f}" if shift else "nan")
PY
)
  false_alarms=$((false_alarms + flagged))
  caught=$((caught + hit))
  shifts+=("$shift")
  echo "pair $i: identical run flagged $flagged path(s); shifted run ($shift pts on flush_log) caught: $hit"
done
median=$(printf '%s\n' "${shifts[@]}" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
echo "histories of $k run(s); false alarms: $false_alarms flagged paths in $pairs checks of identical runs (goal ≤ 1)"
echo "detection: $caught of $pairs shifted runs caught (goal ≥ 95 %), median injected shift $median pts"
