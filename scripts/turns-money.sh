#!/usr/bin/env bash
# What multi-turn rows cost across crashes: 60 six-turn conversations (`turns = "all"`, reasoning
# on) against the built-in simulator, killed with SIGKILL twice mid-run, then resumed to the
# end; prints billed requests per kept row, spend per kept row, and requests that ended in no
# row (paid turns thrown away).
#
#   scripts/turns-money.sh [--bin PATH] [--sim-bin PATH] [--kill-after-s 6] [--kills 2]
#                          [--budget-usd 20] [--keep DIR]
#
# `--kills 0 --budget-usd 0.5` measures a budget stop mid-row instead of crashes: the run ends
# on the budget, and the rows it kept and the turns it paid for in no row are what changed.
#
# Loopback only (127.0.0.1); bounded: --kills runs of --kill-after-s, then one to the end (at
# most --deadline-s, 600).
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
BIN="" SIMBIN="" AFTER=6 KILLS=2 BUDGET=20.0 KEEP="" DEADLINE=600
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --sim-bin) SIMBIN="$2"; shift 2 ;;
    --kill-after-s) AFTER="$2"; shift 2 ;;
    --kills) KILLS="$2"; shift 2 ;;
    --budget-usd) BUDGET="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    --deadline-s) DEADLINE="$2"; shift 2 ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "turns-money.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ]; then
  (cd "$HERE" && cargo build --quiet --bin harvest)
  BIN="${CARGO_TARGET_DIR:-$HERE/target}/debug/harvest"
fi
SIMBIN="${SIMBIN:-$BIN}"
W="${KEEP:-$(mktemp -d)}"
mkdir -p "$W"
python3 - "$W/p.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(60):
        m = [{"role": "system", "content": "Answer briefly."}]
        for u in range(6):
            m.append({"role": "user", "content": f"conv {i} question {u}"})
            m.append({"role": "assistant", "content": f"dataset answer {i}.{u}"})
        f.write(json.dumps({"id": f"c{i:02}", "messages": m}) + "\n")
PY
"$SIMBIN" sim --port 0 --speed-scale 0.05 --no-faults --billing-log "$W/bill.jsonl" > "$W/sim.out" 2>&1 &
SIM=$!
trap 'kill $SIM 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -qo 'http://127.0.0.1:[0-9]*' "$W/sim.out" && break; sleep 0.1; done
BASE="$(grep -o 'http://127.0.0.1:[0-9]*' "$W/sim.out" | head -1)/api/v1"
cat > "$W/h.toml" <<T
base_url = "$BASE"
api_key_env = "TURNS_MONEY_KEY"
budget_usd = $BUDGET
concurrency = 16
output_dir = "out"
[request]
max_tokens = 2000
[[dataset]]
name = "A"
prompts = "p.jsonl"
turns = "all"
T
export TURNS_MONEY_KEY=sk-or-v1-turns-money-0000000000
cd "$W"
for k in $(seq "$KILLS"); do
  "$BIN" run --headless -c h.toml > "run$k.log" 2>&1 & P=$!
  sleep "$AFTER"; kill -9 "$P" 2>/dev/null || true; wait "$P" 2>/dev/null || true
done
timeout "$DEADLINE" "$BIN" run --headless -c h.toml > run3.log 2>&1 || true
python3 - "$W" <<'PY'
import json, os, sys
w = sys.argv[1]
bill = [json.loads(l) for l in open(os.path.join(w, "bill.jsonl")) if l.strip()]
rows = [json.loads(l) for l in open(os.path.join(w, "out/A.jsonl")) if l.strip()]
usd = sum(float(b.get("cost_usd") or 0) for b in bill)
turns = sum(len(r.get("turns", [])) for r in rows)
n = max(len(rows), 1)
print(f"rows {len(rows)} of 60, turns in rows {turns}")
rej = os.path.join(w, "out/A.rejects.jsonl")
if os.path.exists(rej):
    print(f"rejects {sum(1 for l in open(rej) if l.strip())}")
print(f"billed requests {len(bill)} ({len(bill) / n:.2f} per kept row); bill {usd:.6f} USD; "
      f"spend per kept row {usd / n:.6f} USD")
print(f"requests in no row (paid turns thrown away, or in flight at a kill): {len(bill) - turns}")
PY
echo "turns-money.sh: files in $W"
