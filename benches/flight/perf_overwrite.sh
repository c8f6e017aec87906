#!/bin/bash
# idleflow's flight recorder against perf's (issue 40) on the same load
# (examples/dutycycle: 8 threads running and sleeping 10 µs, about 100 k
# dispatches a second), one tool after the other, ROUNDS times:
#   perf record -a --overwrite --switch-output=signal -m PAGES with the kernel
#     events idleflow takes (sched_switch of blocking switch-outs, wake-ups,
#     switch records), and
#   idleflow record --flight KEEP --tail 0s,
# each asked for a dump every PERIOD s with SIGUSR2. A dump counts from the
# signal to its file's appearance under its final name (both tools write it
# elsewhere first and rename it). Prints, per tool, the signal-to-file
# latencies (p50, max), the dumps' seconds and bytes per dispatch (perf:
# per sched_switch sample), and the load's cycles (its threads' work done).
#
#   bash benches/flight/perf_overwrite.sh [ROUNDS] [DUMPS] [PERIOD] [KEEP] [PAGES]
# Run from the repository after `cargo build --release --examples`.
set -u
ROUNDS=${1:-2}; DUMPS=${2:-4}; PERIOD=${3:-3}; KEEP=${4:-10s}; PAGES=${5:-4096}
IF=$PWD/target/release/idleflow
LOAD=$PWD/target/release/examples/dutycycle
D=$(mktemp -d /var/tmp/idleflow-perf-overwrite.XXXX)
SECS=$((DUMPS * PERIOD + 3))
# Waits for a new file matching GLOB (beyond the N there were); prints ms
# from T0 (ns) to its appearance.
appeared() {
  local glob=$1 n=$2 t0=$3
  while [ "$(ls $glob 2>/dev/null | wc -l)" -le "$n" ]; do sleep 0.002; done
  echo $(( ($(date +%s%N) - t0) / 1000000 ))
}
for r in $(seq "$ROUNDS"); do
  for tool in perf idleflow; do
    out=$D/$tool-$r; mkdir -p "$out"
    "$LOAD" --threads 8 --busy-ms 0.01 --sleep-ms 0.01 --seconds $SECS > $out/load.txt &
    LP=$!
    if [ $tool = perf ]; then
      perf record -q -a --overwrite --switch-output=signal -m $PAGES \
        -e sched:sched_switch --filter 'prev_state & 254' \
        -e sched:sched_waking,sched:sched_wakeup_new --switch-events \
        -o $out/perf.data -- sleep $SECS 2> $out/log &
      GLOB="$out/perf.data.2*"
    else
      "$IF" record --flight "$KEEP" --tail 0s --cooldown 0s --max-dumps 1000 \
        --duration $SECS -o $out/dumps 2> $out/log &
      GLOB="$out/dumps/*.idleflow"
    fi
    REC=$!
    sleep "$PERIOD"
    for i in $(seq "$DUMPS"); do
      n=$(ls $GLOB 2>/dev/null | wc -l)
      t0=$(date +%s%N); kill -USR2 $REC
      echo "$tool $r latency_ms $(appeared "$GLOB" $n $t0)" >> $D/lat.txt
      sleep "$PERIOD"
    done
    wait $REC 2>/dev/null; wait $LP
    echo "$tool $r cycles $(awk '{s+=$6} END {print s}' $out/load.txt) (the load's, all threads)" >> $D/lat.txt
  done
done
python3 - "$D" <<'PY'
import glob, os, re, subprocess, sys, statistics
d = sys.argv[1]
lat = {}
for line in open(f"{d}/lat.txt"):
    f = line.split()
    if f[2] == "latency_ms": lat.setdefault(f[0], []).append(int(f[3]))
    else: print("#", line.strip())
for tool, v in lat.items():
    print(f"{tool}: signal to file ms: p50 {statistics.median(v):.0f}, max {max(v)} ({len(v)} dumps)")
for p in sorted(glob.glob(f"{d}/perf-*/perf.data.2*"))[:3]:
    n = subprocess.run(["perf", "script", "-i", p, "-F", "event"], capture_output=True, text=True).stdout.count("sched_switch")
    print(f"perf dump {os.path.basename(p)}: {os.path.getsize(p)/2**20:.1f} MiB, {n} sched_switch samples, {os.path.getsize(p)/max(n,1):.0f} B each")
for p in sorted(glob.glob(f"{d}/idleflow-*/dumps/*.idleflow"))[:3]:
    out = subprocess.run([f"{os.getcwd()}/target/release/idleflow", "report", p], capture_output=True, text=True).stdout
    m = re.search(r"([\d,]+) dispatches", out); s = re.search(r"# ([\d.]+) s on", out)
    n = int(m.group(1).replace(",", "")) if m else 0
    print(f"idleflow dump {os.path.basename(p)}: {os.path.getsize(p)/2**20:.1f} MiB, {s.group(1) if s else '?'} s, {n} dispatches, {os.path.getsize(p)/max(n,1):.1f} B each")
PY
echo "# files in $D"
