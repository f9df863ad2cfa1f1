#!/usr/bin/env bash
# What the dollar cap lets past the budget with the read pause on (issue #36 item 2): one run of
# the built binary, as a user runs it (its one-thread runtime and its batched reads), against
# `harvest sim` at the given pace, every endpoint stopping its bill at a close, pinned to one
# endpoint so that every stream is one the cap closes. Prints the budget, the simulator's bill
# (what would be paid), harvest's ledger, and the bill's overshoot of the budget.
#
#   scripts/cap-overshoot.sh [--bin PATH] [--speed-scale 1] [--concurrency 1000]
#                            [--budget 1.5] [--prompts 3000] [--max-tokens 2000]
#                            [--budget-mode hard|expected] [--keep DIR]
#                            [--tokens-per-s N] [--close-notice-ms MS]
#
# --tokens-per-s sets every endpoint's decode speed (at speed scale 1); --close-notice-ms how
# long a provider goes on decoding after a close before it notices (billed where a close stops
# the bill): at 500 tokens a second and 200 ms, 100 tokens past what was read.
#
# --speed-scale 0.2 is five times the real pace (streams at 150 to 450 tokens a second), where
# the pause must shorten to keep a stream's unread tokens within the cap's transit allowance.
# Loopback only (127.0.0.1); bounded: the run stops at its budget or after --deadline-s (600).
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
BIN="" SPEED=1 CONC=1000 BUDGET=1.5 N=3000 MAXTOK=2000 MODE=hard KEEP="" DEADLINE=600 TPS="" NOTICE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --speed-scale) SPEED="$2"; shift 2 ;;
    --concurrency) CONC="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    --prompts) N="$2"; shift 2 ;;
    --max-tokens) MAXTOK="$2"; shift 2 ;;
    --budget-mode) MODE="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    --deadline-s) DEADLINE="$2"; shift 2 ;;
    --tokens-per-s) TPS="$2"; shift 2 ;;
    --close-notice-ms) NOTICE="$2"; shift 2 ;;
    -h|--help) sed -n 2,19p "$0"; exit 0 ;;
    *) echo "cap-overshoot.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ]; then
  (cd "$HERE" && cargo build --quiet --release --bin harvest)
  BIN="${CARGO_TARGET_DIR:-$HERE/target}/release/harvest"
fi
WORK="${KEEP:-$(mktemp -d)}"
mkdir -p "$WORK"
. "$HERE/scripts/sim-lib.sh"
write_prompts "$WORK/prompts.jsonl" "$N" "Explain idea number {i} step by step."
start_sim "$BIN" "$WORK/sim.log" --seed 7 --speed-scale "$SPEED" --no-faults \
  --billing-log "$WORK/bill.jsonl"
# Every endpoint stops its bill at a close (the simulator then bills what it sent, and every
# stream is one the cap closes) and takes every stream sent (no 429s: the run goes to its full
# width); answers long enough that the cap lands mid-stream.
python3 - "$PORT" "$MAXTOK" "$TPS" "$NOTICE" <<'PY'
import json, sys, urllib.request
patch = {"cancel_stops_billing": True, "capacity": 100000, "close_notice_ms": float(sys.argv[4])}
if sys.argv[3]:
    patch["tokens_per_s"] = float(sys.argv[3])
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/sim/control",
    data=json.dumps({"all": patch,
                     "output_tokens_mean": int(sys.argv[2]) * 0.75}).encode(),
    headers={"content-type": "application/json"})
urllib.request.urlopen(req, timeout=10).read()
PY
cat >"$WORK/harvest.toml" <<TOML
model = "moonshotai/kimi-k2.5"
base_url = "http://127.0.0.1:$PORT/api/v1"
api_key_env = "CAP_OVERSHOOT_KEY"
output_dir = "out"
budget_usd = $BUDGET
budget_mode = "$MODE"
concurrency = $CONC
routing = "pinned"
catalog_refresh_s = 0
[request]
max_tokens = $MAXTOK
[[dataset]]
name = "a"
prompts = "prompts.jsonl"
TOML
set +e
(cd "$WORK" && CAP_OVERSHOOT_KEY=sim timeout "$DEADLINE" "$BIN" run -c harvest.toml --headless \
  --progress-every 60 >"$WORK/run.log" 2>&1)
RC=$?
set -e
python3 - "$WORK" "$RC" "$BUDGET" "$SPEED" "$CONC" "$MODE" <<'PY'
import json, sys, os
work, rc, budget, speed, conc, mode = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
def lines(p):
    if not os.path.exists(p): return []
    return [json.loads(l) for l in open(p) if l.strip()]
ledger = lines(os.path.join(work, "out", "spend.jsonl"))
bill = lines(os.path.join(work, "bill.jsonl"))
billed = sum(e["cost_usd"] for e in bill)
spent = sum(e["usd"] for e in ledger)
closed = sum(1 for e in ledger if e["kind"] == "cancelled")
print(f"run: speed scale {speed}, concurrency {conc}, budget {budget:.4f} USD ({mode}), exit {rc}")
print(f"simulator bill: {billed:.6f} USD over {len(bill)} generations; ledger: {spent:.6f} USD ({spent - billed:+.6f})")
# Tokens billed past what harvest had read, for each stream the cap closed: what the pause
# left unread plus what was on its way (the cap holds 32 a stream for it).
billed_tokens = {e["id"]: e["completion_tokens"] for e in bill}
past = sorted(billed_tokens[e["generation_id"]] - e["completion_tokens"]
              for e in ledger if e["kind"] == "cancelled" and e.get("generation_id") in billed_tokens)
print(f"bill over the budget: {billed - budget:+.6f} USD ({(billed - budget) / budget * 100:+.3f}%)")
if past:
    print(f"closed at the cap: {closed}; tokens billed past those read a closed stream: "
          f"mean {sum(past) / len(past):.1f}, p95 {past[int(len(past) * 0.95)]}, max {past[-1]}")
else:
    print(f"closed at the cap: {closed}")
PY
echo "cap-overshoot.sh: files in $WORK (run.log, out/, bill.jsonl)" >&2
