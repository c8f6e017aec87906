#!/bin/bash
# Run from the repository root after `cargo build --release`; DIR (default /tmp) holds the files.
# usage: postgres.sh [OUT] [SECONDS]
# Debian's PostgreSQL 15 (a cluster of its own in DIR/pg, port 5499, 127.0.0.1 only), pgbench
# -c 8 -j 2 for SECONDS (default 10) while `idleflow record --pid POSTMASTER` records it; prints
# pgbench's tps.
set -u
OUT=${1:-${DIR:-/tmp}/pg.idleflow}; SECS=${2:-10}
IF=${IDLEFLOW:-target/release/idleflow}
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
D=${DIR:-/tmp}/pg
as_pg() { setpriv --reuid=postgres --regid=postgres --clear-groups "$@"; }
if [ ! -d $D/data ]; then
  mkdir -p $D && chown postgres $D
  as_pg $BIN/initdb -A trust -U postgres -D $D/data > /dev/null
fi
as_pg $BIN/pg_ctl -D $D/data -l $D/log -o "-p 5499 -k $D -c listen_addresses=127.0.0.1" -w start > /dev/null
as_pg $BIN/pgbench -h 127.0.0.1 -p 5499 -U postgres -i -s 5 postgres > /dev/null 2>&1
PM=$(head -1 $D/data/postmaster.pid)
$IF record -q --pid $PM --duration $((SECS + 2)) ${RECORD_FLAGS:-} -o "$OUT" &
REC=$!
sleep 1
as_pg $BIN/pgbench -h 127.0.0.1 -p 5499 -U postgres -c 8 -j 2 -T $SECS postgres 2>/dev/null | grep -E "^tps"
wait $REC
as_pg $BIN/pg_ctl -D $D/data -m fast -w stop > /dev/null
