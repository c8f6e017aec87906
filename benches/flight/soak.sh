#!/bin/bash
# The flight recorder's soak (issue 40): a load of about 100 k dispatches a
# second (examples/dutycycle, 8 threads running and sleeping 10 µs each;
# PAIRS=N instead: the saturated hand-off, N pairs) recorded with
# `record --flight KEEP` for MINUTES, a dump asked for every PERIOD seconds
# with `idleflow trigger`; the recorder's RSS and the dump directory's size
# sampled before each request. Prints one line per sample, then the dumps'
# write times (trigger's tail aside: file created to renamed, complete) and
# their resolve times, p50/p99, and bytes per dispatch in the dumps.
#
#   bash benches/flight/soak.sh MINUTES [KEEP] [PERIOD] [PAIRS]
#   e.g. bash benches/flight/soak.sh 10 60s 20      (the figures in PERFORMANCE.md §6)
#
# PERF=MiB: perf's flight recorder on the same run, for comparison:
# `perf record --overwrite --switch-output=signal` with the same kernel events
# (sched_switch and sched_waking samples, switch records) system-wide, with a
# ring of MiB per CPU; it gets SIGUSR2 when idleflow gets its request. Printed:
# perf's dump latency (signal to its "Dump" line), bytes per switch record and
# the span its dumps cover.
#
# Run from the repository after `cargo build --release --examples`.
set -euo pipefail
MIN=${1:-5}; KEEP=${2:-60s}; PERIOD=${3:-15}; PAIRS=${4:-0}
BIN=$PWD/target/release/idleflow
if [ "$PAIRS" -gt 0 ]; then
    WORK=("$PWD/target/release/examples/handoff" --pairs "$PAIRS")
else
    WORK=("$PWD/target/release/examples/dutycycle" --threads 8 --busy-ms 0.01 --sleep-ms 0.01)
fi
OUT=/tmp/flight-soak; rm -rf "$OUT" "$OUT.log" "$OUT-perf" "$OUT-perf.log" "$OUT-perf.lat"
SECS=$((MIN * 60))
PERF=${PERF:-0}
PERF_PID=
if [ "$PERF" -gt 0 ]; then
    mkdir -p "$OUT-perf"
    perf record -e sched:sched_switch,sched:sched_waking --switch-events -a --overwrite \
        --switch-output=signal -m "${PERF}M" -o "$OUT-perf/perf.data" >/dev/null 2>"$OUT-perf.log" &
    PERF_PID=$!
    sleep 1
fi
"$BIN" record --flight "$KEEP" --cooldown 1s --tail 0.1s --max-dumps 100000 -o "$OUT" \
    -- "${WORK[@]}" --seconds "$SECS" >/dev/null 2>"$OUT.log" &
REC=$!
sleep 3
echo "# t_s rss_MiB dumps_dir_MiB"
T0=$(date +%s)
while kill -0 "$REC" 2>/dev/null; do
    now=$(( $(date +%s) - T0 ))
    rss=$(ps -o rss= -p "$REC" 2>/dev/null || echo 0)
    dir=$(du -sm "$OUT" 2>/dev/null | cut -f1)
    echo "$now $((rss / 1024)) ${dir:-0}"
    "$BIN" trigger --pid "$REC" >/dev/null 2>&1 || true
    if [ -n "$PERF_PID" ]; then
        # perf says "Dump FILE" once the file is written.
        before=$(grep -c "Dump " "$OUT-perf.log" || true)
        t0=$(date +%s%N)
        kill -USR2 "$PERF_PID"
        for _ in $(seq 2000); do
            [ "$(grep -c "Dump " "$OUT-perf.log" || true)" -gt "$before" ] && break
            sleep 0.002
        done
        echo $(( ($(date +%s%N) - t0) / 1000000 )) >> "$OUT-perf.lat"
    fi
    sleep "$PERIOD"
    # Keep the disk flat too: the dumps were measured, drop them (perf's
    # but the last two).
    find "$OUT" -name '*.idleflow' -mmin +1 -delete 2>/dev/null || true
    if [ -n "$PERF_PID" ]; then
        ls -t "$OUT-perf"/perf.data.* 2>/dev/null | tail -n +3 | xargs -r rm -f
    fi
done
wait "$REC" || true
if [ -n "$PERF_PID" ]; then
    kill -INT "$PERF_PID"; wait "$PERF_PID" || true
fi
python3 - "$OUT.log" <<'PY'
import re, sys, statistics
w, r, bpd = [], [], []
for line in open(sys.argv[1]):
    m = re.search(r"written: ([\d.]+) s, (\d+) dispatches, ([\d.]+) MiB in (\d+) ms(?: \(stacks resolved in (\d+) ms more\))?", line)
    if m:
        w.append(int(m.group(4)))
        if m.group(5): r.append(int(m.group(5)))
        d = int(m.group(2))
        if d: bpd.append(float(m.group(3)) * 2**20 / d)
def pct(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
print(f"# dumps: {len(w)}; write ms p50 {pct(w,50)} p99 {pct(w,99)} max {max(w)}")
if r: print(f"# resolve ms p50 {pct(r,50)} p99 {pct(r,99)} max {max(r)}")
if bpd: print(f"# bytes per dispatch in the dumps: median {statistics.median(bpd):.1f}")
PY
tail -3 "$OUT.log"
if [ -n "$PERF_PID" ]; then
    python3 - "$OUT-perf.lat" <<'PY'
import sys
v = sorted(int(x) for x in open(sys.argv[1]) if x.strip())
pct = lambda p: v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
print(f"# perf --overwrite: {len(v)} dumps; signal to 'Dump' ms p50 {pct(50)} p99 {pct(99)} max {max(v)}")
PY
    # The newest full dump (the last one is perf's own at its exit).
    f=$(ls -t "$OUT-perf"/perf.data.* | sed -n 2p)
    switches=$(perf report -D -i "$f" 2>/dev/null | grep -c "PERF_RECORD_SWITCH" || true)
    samples=$(perf report -D -i "$f" 2>/dev/null | grep -c "PERF_RECORD_SAMPLE" || true)
    span=$(perf script -F time -i "$f" 2>/dev/null | sed -n '1p;$p' | tr -d ' :' | paste -sd' ' \
        | awk '{printf "%.2f", $2 - $1}')
    size=$(stat -c %s "$f")
    echo "# perf dump $f: $((size / 1048576)) MiB, $switches switch records, $samples samples," \
        "$(( size / (switches + samples + 1) )) bytes a record, spans $span s"
fi
