#!/bin/bash
# Run from the repository root after `cargo build --release`; DIR (default /tmp) holds the files.
# usage: alternate.sh tomcat|h2 ROUNDS [MODES...]     MODES default: plain noagent waits
#
# One server process, warmed up once, then in each round one load window per
# mode, in the order given rotated by one each round (see below): `plain` runs the
# load alone; any other mode records the running server with
# `idleflow record --pid PID` (noagent: --no-agent; waits: the default Java
# mode, JFR started through the attach mechanism, WT=MS for --wait-threshold;
# mon10: the default but contended monitor enters at JFR's 10 ms too;
# nopolicy: the default without the policy that records every wait while
# the JVM waits rarely (--all-waits-below 0); nostacks: the default without
# the stacks at the switch-outs (--no-stacks);
# all: --no-agent --all-switch-samples; bpf / bpfnoagent / bpfbare: the
# default / --no-agent / bare with the eBPF event source (--events bpf);
# bpfkern / bpfuser: --no-agent --events bpf with kernel stacks only / kernel
# and user stacks, no waker stacks (what each kind of stack costs); bpfall:
# --no-agent --events bpf --stack-budget 0 (a stack at every switch to idle);
# bpfwaits / bpfstacks: --events bpf with --java waits (the JVM's flight
# recorder alone) / --java stacks (the perf-map agent alone); bpftrace: a
# bpftrace script counting the same three tracepoints per CPU in a map, no
# record written (what any per-event hook costs, idleflow's floor);
# flight: the default mode as a flight recorder (--flight 60s, dumps into a
# directory) with triggers judged on every batch that never fire here
# (`waiting>=64`, `convoy>=16`, `cpu-idle in nobody-*`): what always-on costs
# while nothing happens;
# defer: the default mode with the merge deferred past the window
# (IDLEFLOW_DEFER=1: the drained rounds spooled, merged once it closed);
# perf: `perf record -a` of the same
# kernel records as idleflow's default, to tell the kernel's part of the cost
# from the recorder's). The recorder starts SETTLE s (default
# 3) before the load, so JFR's start-up is outside the measured window; the
# per-run figures of tomcat.sh / pairs.sh include it.
# Removes what separate server runs add to the noise: start-up, JIT
# decisions, the heap's layout. Prints one row per round (throughput, and the
# machine's busy CPU per unit of work from /proc/stat, in µs: less exposed to
# this VM's swings than throughput) and the median ratios of each mode to
# plain in the same round.
set -u
SERVER=$1; ROUNDS=$2; shift 2
MODES=${*:-plain noagent waits}
W=${WINDOW:-10}; SETTLE=${SETTLE:-3}
IF=${IDLEFLOW:-target/release/idleflow}
D=${DIR:-/tmp}
J=/usr/lib/jvm/java-17-openjdk-amd64/bin
case $SERVER in
  tomcat)
    export CATALINA_HOME=/usr/share/tomcat10 CATALINA_BASE=/var/lib/tomcat10 CATALINA_TMPDIR=/tmp
    export JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
    URL=http://127.0.0.1:8080/examples/servlets/servlet/HelloWorldExample
    $CATALINA_HOME/bin/catalina.sh run > $D/catalina.log 2>&1 &
    for i in $(seq 240); do curl -sf $URL >/dev/null 2>&1 && break; sleep 0.5; done
    PID=$(pgrep -f org.apache.catalina.startup.Bootstrap | head -1)
    load() { ab -t $1 -n 100000000 -c 4 -k $URL 2>&1 | awk '/Requests per second/ {print $4}'; }
    stop() { pkill -TERM -f org.apache.catalina.startup.Bootstrap; }
    ;;
  h2)
    mkdir -p $D/h2client
    [ $D/h2client/HotRow.class -nt benches/servers/HotRow.java ] || $J/javac -d $D/h2client benches/servers/HotRow.java
    $J/java -cp /usr/share/java/h2.jar org.h2.tools.Server -tcp -tcpPort 9092 -ifNotExists > $D/h2.log 2>&1 &
    for i in $(seq 120); do (echo > /dev/tcp/127.0.0.1/9092) 2>/dev/null && break; sleep 0.5; done
    PID=$(pgrep -f org.h2.tools.Server | head -1)
    load() { $J/java -cp $D/h2client:/usr/share/java/h2.jar HotRow 4 $1 | awk '/updates\/s/ {print $2}'; }
    stop() { pkill -TERM -f org.h2.tools.Server; }
    ;;
  *) echo "usage: $0 tomcat|h2 ROUNDS [MODES...]" >&2; exit 2 ;;
esac
# Warm-up: the first flight recording started in a JVM initializes JFR and
# makes the JIT recompile what its event classes touched; recorded once here
# (with the default options) so that no mode's first round pays for it.
if [ "$MODES" != plain ]; then
  $IF record -q --pid $PID --duration 22 -o $D/alt-warm.idleflow &
  sleep 1; load 20 > /dev/null; wait $!
else
  load 20 > /dev/null
fi
echo "| round | $(echo $MODES | sed 's/ / | /g') |"
echo "|---$(for m in $MODES; do printf '|---'; done)|"
declare -A R C
busy() { awk '/^cpu / {print $2+$3+$4+$7+$8}' /proc/stat; }   # user nice system irq softirq (no steal)
idle() { awk '/^cpu / {print $5+$6}' /proc/stat; }              # idle iowait
HZ=$(getconf CLK_TCK)
# Each round runs the modes in another order (rotated by one a round), so
# that no mode always runs first or last in a round: a server that slows
# down over a round (its heap, the page cache filling with recordings)
# would otherwise bias the ratios by position. The row still lists the
# modes in the order given.
MODE_LIST=($MODES); NM=${#MODE_LIST[@]}
for r in $(seq $ROUNDS); do
  row="| $r"
  declare -A CELL
  for k in $(seq 0 $((NM - 1))); do
    m=${MODE_LIST[$(( (k + r - 1) % NM ))]}
    case $m in
      plain) b0=$(busy); i0=$(idle); v=$(load $W); b1=$(busy); i1=$(idle) ;;
      *)
        E=""
        case $m in
          noagent) A="--no-agent" ;;
          defer) A=""; E="IDLEFLOW_DEFER=1" ;;
          waits) A="${WT:+--wait-threshold $WT}" ;;
          mon10) A="--monitor-threshold 10" ;;
          nopolicy) A="--all-waits-below 0" ;;
          nostacks) A="--no-stacks" ;;
          bare) A="--no-agent --no-stacks" ;;
          all) A="--no-agent --all-switch-samples" ;;
          bpf) A="--events bpf" ;;
          bpfnoagent) A="--no-agent --events bpf" ;;
          bpfbare) A="--no-agent --no-stacks --events bpf" ;;
          bpfkern) A="--no-agent --events bpf --stack-size 0 --no-waker-stacks" ;;
          bpfuser) A="--no-agent --events bpf --no-waker-stacks" ;;
          bpfall) A="--no-agent --events bpf --stack-budget 0" ;;
          bpfwaits) A="--events bpf --java waits" ;;
          bpfstacks) A="--events bpf --java stacks" ;;
        esac
        if [ $m = bpftrace ]; then
          bpftrace -e "tracepoint:sched:sched_switch,tracepoint:sched:sched_waking,tracepoint:sched:sched_wakeup_new { @[cpu] = count(); } interval:s:$((SETTLE + W + 1)) { exit(); }" \
            > /dev/null 2>&1 &
        elif [ $m = perf ]; then
          perf record -q -a -e sched:sched_switch --filter 'prev_state & 254' \
            -e sched:sched_wakeup,sched:sched_wakeup_new --switch-events \
            -o $D/alt-perf.data -- sleep $((SETTLE + W + 1)) 2>/dev/null &
        elif [ $m = flight ]; then
          rm -rf $D/alt-flight
          $IF record -q --pid $PID --duration $((SETTLE + W + 1)) --flight 60s -o $D/alt-flight \
            --trigger 'waiting>=64' --trigger 'convoy>=16' --trigger 'cpu-idle in nobody-*' &
        else
          env $E $IF record -q $A --pid $PID --duration $((SETTLE + W + 1)) -o $D/alt-$m.idleflow &
        fi
        REC=$!
        sleep $SETTLE
        b0=$(busy); i0=$(idle); v=$(load $W); b1=$(busy); i1=$(idle)
        wait $REC
        ;;
    esac
    R[$r,$m]=$v
    C[$r,$m]=$(python3 -c "print(round(($b1-$b0)/$HZ*1e6/($v*$W),2))")
    idle_pct=$(python3 -c "print(round(($i1-$i0)*100/(($i1-$i0)+($b1-$b0))))")
    CELL[$m]="$v (${C[$r,$m]} µs, ${idle_pct} % idle)"
  done
  for m in $MODES; do row="$row | ${CELL[$m]}"; done
  echo "$row |"
done
stop
# A server that ignores SIGTERM would run on into the next benchmark (or test
# run) with its flight recorder's threads: killed after 15 s.
for i in $(seq 30); do kill -0 $PID 2>/dev/null || break; sleep 0.5; done
kill -KILL $PID 2>/dev/null
wait 2>/dev/null
for m in $MODES; do
  [ $m = plain ] && continue
  ratios=$(for r in $(seq $ROUNDS); do python3 -c "print(${R[$r,$m]}/${R[$r,plain]})"; done | sort -n | tr '\n' ' ')
  echo "$m / plain per round: $ratios → median $(echo $ratios | tr ' ' '\n' | python3 -c 'import sys,statistics; print(round(statistics.median(float(x) for x in sys.stdin if x.strip()),3))')"
  cpu=$(for r in $(seq $ROUNDS); do python3 -c "print(${C[$r,$m]}/${C[$r,plain]})"; done | sort -n | tr '\n' ' ')
  echo "$m / plain, busy CPU per unit of work: $cpu → median $(echo $cpu | tr ' ' '\n' | python3 -c 'import sys,statistics; print(round(statistics.median(float(x) for x in sys.stdin if x.strip()),3))')"
done
