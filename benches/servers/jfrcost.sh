#!/bin/bash
# What a JVM's flight recorder with idleflow's settings costs an attached Tomcat, apart from
# idleflow: `jcmd PID JFR.start settings=…` with variants of the settings against no recording,
# rounds interleaved and rotated (PERFORMANCE.md 5o). Writes the variants into /tmp/jfc first:
#   full   idleflow's .jfc (tracer/jfr/src/lib.rs `settings`, 10-ms thresholds)
#   nosock without the socket and file events      nodump without the thread dump
#   park   monitor enter, monitor wait and park only
# usage: jfrcost.sh ROUNDS MODES...   (none | full | nosock | nodump | park)
# Prints per round the requests/s and the µs of CPU per request (the JVM's, the machine's), then
# per variant the medians of the ratios to no recording in the same round.
mkdir -p /tmp/jfc
python3 - <<'PY'
head = '<?xml version="1.0" encoding="UTF-8"?>\n<configuration version="2.0" label="idleflow" description="x" provider="idleflow">\n'
waits = ["jdk.JavaMonitorEnter", "jdk.JavaMonitorWait", "jdk.ThreadPark", "jdk.ThreadSleep", "jdk.SocketRead",
         "jdk.SocketWrite", "jdk.FileRead", "jdk.FileWrite", "jdk.FileForce"]
ev = lambda n: f'  <event name="{n}"><setting name="enabled">true</setting><setting name="stackTrace">true</setting><setting name="threshold">10000 us</setting></event>\n'
start = '  <event name="jdk.ThreadStart"><setting name="enabled">true</setting><setting name="stackTrace">false</setting></event>\n'
dump = '  <event name="jdk.ThreadDump"><setting name="enabled">true</setting><setting name="period">beginChunk</setting></event>\n'
def w(name, evs, extra):
    open(f"/tmp/jfc/{name}.jfc", "w").write(head + "".join(ev(e) for e in evs) + extra + "</configuration>\n")
w("full", waits, start + dump); w("nosock", waits[:4], start + dump); w("nodump", waits, start); w("park", waits[:3], "")
PY
ROUNDS=$1; shift; MODES=($*); NM=${#MODES[@]}
export CATALINA_HOME=/usr/share/tomcat10 CATALINA_BASE=/var/lib/tomcat10 CATALINA_TMPDIR=/tmp JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
J=$JAVA_HOME/bin
URL=http://127.0.0.1:8080/examples/servlets/servlet/HelloWorldExample
$CATALINA_HOME/bin/catalina.sh run > /tmp/catalina.log 2>&1 &
for i in $(seq 240); do curl -sf $URL >/dev/null 2>&1 && break; sleep 0.5; done
PID=$(pgrep -f org.apache.catalina.startup.Bootstrap | head -1)
load() { ab -t $1 -n 100000000 -c 4 -k $URL 2>&1 | awk '/Requests per second/ {print $4}'; }
# The JVM's CPU (user + system, clock ticks of 10 ms) and the machine's busy ticks, around a load.
jvm_ticks() { awk '{print $14 + $15}' /proc/$PID/stat; }
busy_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
$J/jcmd $PID JFR.start name=warm settings=/tmp/jfc/full.jfc > /dev/null; load 20 > /dev/null; $J/jcmd $PID JFR.stop name=warm > /dev/null
declare -A R C B
for r in $(seq $ROUNDS); do
  for k in $(seq 0 $((NM - 1))); do
    m=${MODES[$(( (k + r - 1) % NM ))]}
    [ $m != none ] && $J/jcmd $PID JFR.start name=x settings=/tmp/jfc/$m.jfc > /dev/null
    sleep 3
    j0=$(jvm_ticks); b0=$(busy_ticks)
    R[$r,$m]=$(load 10)
    j1=$(jvm_ticks); b1=$(busy_ticks)
    # µs of the JVM's CPU and of the machine's per request (ticks of 10 ms over 10 s of load)
    C[$r,$m]=$(python3 -c "print(round(($j1 - $j0) * 1000 / ${R[$r,$m]}, 2))")
    B[$r,$m]=$(python3 -c "print(round(($b1 - $b0) * 1000 / ${R[$r,$m]}, 2))")
    [ $m != none ] && $J/jcmd $PID JFR.stop name=x > /dev/null
    sleep 1
  done
  echo "round $r: $(for m in ${MODES[@]}; do printf '%s=%s (jvm %s, machine %s µs/req) ' $m ${R[$r,$m]} ${C[$r,$m]} ${B[$r,$m]}; done)"
done
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
for m in ${MODES[@]}; do
  [ $m = none ] && continue
  echo "$m / none, JVM CPU per request: median $(for r in $(seq $ROUNDS); do python3 -c "print(${C[$r,$m]}/${C[$r,none]})"; done | median); machine: median $(for r in $(seq $ROUNDS); do python3 -c "print(${B[$r,$m]}/${B[$r,none]})"; done | median)"
  echo "$m / none: $(for r in $(seq $ROUNDS); do python3 -c "print(round(${R[$r,$m]}/${R[$r,none]},3))"; done | sort -n | tr '\n' ' ') median $(for r in $(seq $ROUNDS); do python3 -c "print(${R[$r,$m]}/${R[$r,none]})"; done | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')"
done
pkill -TERM -f org.apache.catalina.startup.Bootstrap
