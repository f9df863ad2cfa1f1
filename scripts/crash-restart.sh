#!/usr/bin/env bash
# A crash that outlives `/generation`'s memory (reliability-probe-5 P2): a hard-budget run
# against `harvest sim` where every endpoint bills a closed stream in full, killed with
# SIGKILL mid-run while `/generation` lags (it answers 404 for --lag-s after a generation
# ends), restarted after --wait-s (past the 15 minutes after which a crash's attempt still
# unknown is booked without its look-up), run to its budget, then settled with
# `status --reconcile` once the lag is lifted. Prints the budget, the simulator's bill, the
# ledger, and the bill's overshoot of the budget.
#
#   scripts/crash-restart.sh [--bin PATH] [--budget 0.5] [--max-tokens 8192]
#                            [--concurrency 100] [--prompts 2000] [--kill-after-s 8]
#                            [--wait-s 960] [--lag-s 1200] [--speed-scale 1] [--keep DIR]
#
# It takes --wait-s of wall time (16 minutes by default): the rule it measures is about time
# passing on the wall clock between two processes. Loopback only (127.0.0.1); bounded: each
# run is under `timeout --deadline-s` (600).
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
BIN="" BUDGET=0.5 MAXTOK=8192 CONC=100 N=2000 KILL=8 WAIT=960 LAG=1200 SPEED=1 KEEP=""
DEADLINE=600
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    --max-tokens) MAXTOK="$2"; shift 2 ;;
    --concurrency) CONC="$2"; shift 2 ;;
    --prompts) N="$2"; shift 2 ;;
    --kill-after-s) KILL="$2"; shift 2 ;;
    --wait-s) WAIT="$2"; shift 2 ;;
    --lag-s) LAG="$2"; shift 2 ;;
    --speed-scale) SPEED="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    --deadline-s) DEADLINE="$2"; shift 2 ;;
    -h|--help) sed -n 2,15p "$0"; exit 0 ;;
    *) echo "crash-restart.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ]; then
  (cd "$HERE" && cargo build --quiet --release --bin harvest)
  BIN="${CARGO_TARGET_DIR:-$HERE/target}/release/harvest"
fi
. "$HERE/scripts/sim-lib.sh"
WORK="${KEEP:-$(mktemp -d)}"
mkdir -p "$WORK"
write_prompts "$WORK/prompts.jsonl" "$N" "Work through problem {i} and explain each step."
start_sim "$BIN" "$WORK/sim.log" --seed 7 --speed-scale "$SPEED" --no-faults \
  --billing-log "$WORK/bill.jsonl"
# Every endpoint bills a close in full; answers long enough that the budget closes streams.
sim_control "{\"all\": {\"cancel_stops_billing\": false}, \"generation_lag_ms\": $((LAG * 1000)),
  \"output_tokens_mean\": $((MAXTOK / 2)), \"output_tokens_sigma\": 1.1}"
cat >"$WORK/harvest.toml" <<TOML
model = "moonshotai/kimi-k2.5"
base_url = "http://127.0.0.1:$PORT/api/v1"
api_key_env = "CRASH_RESTART_KEY"
output_dir = "out"
budget_usd = $BUDGET
budget_mode = "hard"
concurrency = $CONC
catalog_refresh_s = 0
[request]
max_tokens = $MAXTOK
[[dataset]]
name = "a"
prompts = "prompts.jsonl"
TOML
run() {
  (cd "$WORK" && CRASH_RESTART_KEY=sim timeout "$DEADLINE" "$BIN" run -c harvest.toml \
    --headless --progress-every 10 >>"$WORK/run.log" 2>&1)
}
set +e
(cd "$WORK" && exec env CRASH_RESTART_KEY=sim "$BIN" run -c harvest.toml --headless \
  --progress-every 2 >"$WORK/run.log" 2>&1) &
FIRST=$!
sleep "$KILL"
kill -9 "$FIRST"
wait "$FIRST" 2>/dev/null
echo "crash-restart.sh: killed the first run after ${KILL}s; waiting ${WAIT}s" >&2
sleep "$WAIT"
echo "--- restart after ${WAIT}s ---" >>"$WORK/run.log"
run
RC=$?
sim_control '{"generation_lag_ms": 0}'
# A stream the restart's end closed where a close is billed in full is known to `/generation`
# only once its provider ends it (up to max_tokens at real pace): ask again until none is
# unknown, bounded (stop-expected.sh does the same).
for _ in $(seq 1 60); do
  sleep 2
  (cd "$WORK" && CRASH_RESTART_KEY=sim "$BIN" status out --reconcile >"$WORK/reconcile.log" 2>&1)
  grep -q "still unknown" "$WORK/reconcile.log" || break
done
set -e
python3 - "$WORK" "$RC" "$BUDGET" <<'PY'
import json, sys, os
work, rc, budget = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def lines(p):
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
ledger = lines(os.path.join(work, "out", "spend.jsonl"))
billed = sum(e["cost_usd"] for e in lines(os.path.join(work, "bill.jsonl")))
spent = sum(e["usd"] for e in ledger)
print(f"restart exit {rc}; budget {budget:.4f} USD (hard)")
print(f"simulator bill: {billed:.6f} USD; ledger after reconcile: {spent:.6f} USD ({spent - billed:+.6f})")
print(f"bill over the budget: {billed - budget:+.6f} USD ({(billed - budget) / budget * 100:+.3f}%)")
PY
echo "crash-restart.sh: files in $WORK (run.log, reconcile.log, out/, bill.jsonl)" >&2
