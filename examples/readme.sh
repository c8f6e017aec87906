#!/usr/bin/env bash
# Regenerates the README's example report from the recording it shows, so
# that the README never drifts from the code: tests/readme.rs fails until
# this runs after a change to the report. Each generated block follows a
# marker line `<!-- examples/readme.sh: report REC | head -N -->`; the
# block's lines after its `$ … report …` command line are replaced with the
# first N lines of `idleflow report REC`.
#
#   bash examples/readme.sh            # regenerate the blocks (no root)
#   sudo bash examples/readme.sh --record
#                                      # first record LockedIo again, as the
#                                      # README shows it (the default mode)
set -euo pipefail
cd "$(dirname "$0")/.."
REC=tests/golden/recordings/lockedio.idleflow
J=/usr/lib/jvm/java-17-openjdk-amd64/bin
if [ "${1:-}" = --record ]; then
  cargo build --release
  mkdir -p target/java
  $J/javac -d target/java examples/java/*.java
  ./target/release/idleflow record -o "$REC" -- $J/java -cp target/java LockedIo 4 2
fi
[ -x target/release/idleflow ] || cargo build --release
python3 - README.md <<'PY'
import re, subprocess, sys
path = sys.argv[1]
lines = open(path).read().split("\n")
marker = re.compile(r"^<!-- examples/readme\.sh: report (\S+) \| head -(\d+) -->$")
out, i, blocks = [], 0, 0
while i < len(lines):
    line = lines[i]
    out.append(line)
    m = marker.match(line)
    i += 1
    if not m:
        continue
    rec, n = m.group(1), int(m.group(2))
    # The fence and the command lines stay as written.
    while i < len(lines) and not (lines[i].startswith("$ ") and " report " in lines[i]):
        out.append(lines[i]); i += 1
    out.append(lines[i]); i += 1
    report = subprocess.run(["./target/release/idleflow", "report", rec],
                            check=True, capture_output=True, text=True).stdout
    out.extend(report.split("\n")[:n])
    while i < len(lines) and lines[i] != "```":
        i += 1
    blocks += 1
if blocks == 0:
    sys.exit("no `<!-- examples/readme.sh: … -->` marker in " + path)
open(path, "w").write("\n".join(out))
print(f"{path}: {blocks} block(s) regenerated")
PY
