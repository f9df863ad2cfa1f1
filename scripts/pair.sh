#!/usr/bin/env bash
# Two harvest builds side by side at real pace (issue #36): each round runs both at the same
# time, each with its own simulator (scripts/bench.sh, the real-pace job of BENCHMARKS.md,
# harvest only), and prints each one's CPU-seconds per 1M output tokens and B/A.
#
#   scripts/pair.sh [--rounds 3] BIN_A BIN_B [bench.sh options instead of the default job]
#
# Why at the same time: on a shared 2-core host, runs back to back of one build vary by 20-30%
# (4.15 to 5.63 CPU-s per 1M tokens within ten minutes); two runs at once meet the same host,
# and their ratio varied by under 1% between rounds where a change was there (BENCHMARKS.md).
# A change under ~2% is not told from noise in three rounds. Loopback only; each run is bounded
# by bench.sh's own timeout.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
ROUNDS=3
if [ "${1:-}" = "--rounds" ]; then ROUNDS="$2"; shift 2; fi
[ $# -ge 2 ] || { sed -n '2,12p' "$0"; exit 2; }
A="$1"; B="$2"; shift 2
job=("$@")
if [ ${#job[@]} -eq 0 ]; then
  job=(full --tls --speed-scale 1 --concurrency 500 --n 1000 --mean 600 --max-tokens 1200 --no-peer)
fi
for bin in "$A" "$B"; do
  [ -x "$bin" ] || { echo "pair.sh: no executable at $bin" >&2; exit 2; }
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cpu() { grep "CPU-s per 1M" "$1" | awk '{print $6}'; }
for r in $(seq 1 "$ROUNDS"); do
  HARVEST_BIN="$A" "$HERE/scripts/bench.sh" "${job[@]}" > "$tmp/a" 2>&1 &
  pa=$!
  HARVEST_BIN="$B" "$HERE/scripts/bench.sh" "${job[@]}" > "$tmp/b" 2>&1 || true
  wait "$pa" || true
  a="$(cpu "$tmp/a")"; b="$(cpu "$tmp/b")"
  if [ -z "$a" ] || [ -z "$b" ]; then
    echo "pair.sh: round $r failed; the runs said:" >&2
    tail -5 "$tmp/a" "$tmp/b" >&2
    exit 1
  fi
  echo "round $r: A $a  B $b  B/A $(python3 -c "print(f'{$b / $a:.3f}')")"
done
