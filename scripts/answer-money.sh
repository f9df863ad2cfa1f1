#!/usr/bin/env bash
# What answers cost: one job against the built-in simulator (reasoning on, Kimi K2.5 table, full
# speed, no faults unless given) with a small max_tokens, then the figures every change to what
# happens to an answer must state before and after: requests per prompt, spend per kept row,
# the simulator's bill against harvest's ledger, rows kept/cut while thinking, rejects by kind.
#
#   scripts/answer-money.sh [--bin PATH] [--prompts 300] [--max-tokens 256] [--concurrency 100]
#                           [--budget 50] [--faults SPEC] [--keep DIR] [--sim-bin PATH]
#                           [--replay DIR] [--tools]
# --sim-bin serves the simulator from another binary: to compare an older harvest (--bin)
# against the same simulator. --replay serves the recorded bodies of DIR in turn (`harvest sim
# --replay`: real answers, tool calls among them), --tools offers the requests a tool.
#
# Loopback only (127.0.0.1); bounded: the run stops at its budget or after --deadline-s (600).
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
BIN="" SIMBIN="" N=300 MAXTOK=256 CONC=100 BUDGET=50 FAULTS="" KEEP="" DEADLINE=600 REPLAY="" TOOLS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --sim-bin) SIMBIN="$2"; shift 2 ;;
    --prompts) N="$2"; shift 2 ;;
    --max-tokens) MAXTOK="$2"; shift 2 ;;
    --concurrency) CONC="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    --faults) FAULTS="$2"; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    --deadline-s) DEADLINE="$2"; shift 2 ;;
    --replay) REPLAY="$2"; shift 2 ;;
    --tools) TOOLS='extra = { tools = [{ type = "function", function = { name = "add", description = "Adds two numbers", parameters = { type = "object", properties = { a = { type = "number" }, b = { type = "number" } } } } }] }'; shift ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "answer-money.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ]; then
  (cd "$HERE" && cargo build --quiet --bin harvest)
  BIN="${CARGO_TARGET_DIR:-$HERE/target}/debug/harvest"
fi
SIMBIN="${SIMBIN:-$BIN}"
WORK="${KEEP:-$(mktemp -d)}"
mkdir -p "$WORK"
. "$HERE/scripts/sim-lib.sh"
write_prompts "$WORK/prompts.jsonl" "$N" "Explain idea number {i} step by step."
sim_args=(--seed 7 --speed-scale 0 --no-faults --billing-log "$WORK/bill.jsonl")
[ -n "$FAULTS" ] && sim_args+=(--faults "$FAULTS")
[ -n "$REPLAY" ] && sim_args+=(--replay "$REPLAY")
start_sim "$SIMBIN" "$WORK/sim.log" "${sim_args[@]}"
cat >"$WORK/harvest.toml" <<TOML
model = "moonshotai/kimi-k2.5"
base_url = "http://127.0.0.1:$PORT/api/v1"
api_key_env = "ANSWER_MONEY_KEY"
output_dir = "out"
budget_usd = $BUDGET
concurrency = $CONC
catalog_refresh_s = 0
[request]
max_tokens = $MAXTOK
$TOOLS
[[dataset]]
name = "a"
prompts = "prompts.jsonl"
TOML
set +e
ANSWER_MONEY_KEY=sim timeout "$DEADLINE" "$BIN" run -c "$WORK/harvest.toml" --headless --progress-every 60 \
  >"$WORK/run.log" 2>&1
RC=$?
set -e
python3 - "$WORK" "$RC" "$N" "$MAXTOK" <<'PY'
import json, sys, collections, os
work, rc, n, maxtok = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
out = os.path.join(work, "out")
def lines(p):
    if not os.path.exists(p): return []
    return [json.loads(l) for l in open(p) if l.strip()]
ledger = lines(os.path.join(out, "spend.jsonl"))
rows = lines(os.path.join(out, "a.jsonl"))
rejects = lines(os.path.join(out, "a.rejects.jsonl"))
bill = sum(e["cost_usd"] for e in lines(os.path.join(work, "bill.jsonl")))
requests = sum(1 for e in ledger if e["kind"] == "dispatched")
spent = sum(e["usd"] for e in ledger)
kept_cost = sum(r["cost_usd"] for r in rows)
cut_thinking = sum(1 for r in rows if r.get("cut_thinking"))
truncated = sum(1 for r in rows if r.get("truncated"))
calls = sum(1 for r in rows if r["conversations"][-1].get("tool_calls"))
kinds = collections.Counter(r["error_kind"] for r in rejects)
print(f"job: {n} prompts, max_tokens {maxtok}, exit {rc}")
print(f"requests: {requests} ({requests / max(n, 1):.2f} per prompt)")
print(f"rows kept: {len(rows)} (truncated {truncated}, of which cut while thinking {cut_thinking}; tool calls {calls}); rejects: {dict(kinds) or 0}")
print(f"ledger: {spent:.6f} USD; simulator bill: {bill:.6f} USD ({spent - bill:+.6f})")
print(f"kept rows hold {kept_cost:.6f} USD; spend per kept row {spent / max(len(rows), 1):.6f} USD; "
      f"bill per request {bill / max(requests, 1):.6f} USD")
PY
echo "answer-money.sh: files in $WORK (run.log, out/, bill.jsonl)" >&2
