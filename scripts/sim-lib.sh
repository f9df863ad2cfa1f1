# Sourced by the measurement scripts: starts `harvest sim` on a free loopback port and waits
# until it listens. `start_sim BIN LOG ARGS...` sets PORT and SIM (its pid), and kills it on
# exit. `write_prompts FILE N TEXT` writes N prompts with ids p0.., TEXT with `{i}` for the
# prompt's number. `sim_control JSON` posts JSON to the started simulator's `/sim/control`.
start_sim() {
  local bin="$1" log="$2"
  shift 2
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "$bin" sim --port "$PORT" "$@" >"$log" 2>&1 &
  SIM=$!
  trap 'kill $SIM 2>/dev/null || true' EXIT
  for _ in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 0.2)" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "the simulator did not listen on 127.0.0.1:$PORT (see $log)" >&2
  return 1
}

write_prompts() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"id": f"p{i}", "prompt": sys.argv[3].replace("{i}", str(i))}) + "\n")
PY
}

sim_control() {
  python3 - "$PORT" "$1" <<'PY'
import sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/sim/control",
    data=sys.argv[2].encode(), headers={"content-type": "application/json"}, method="POST")
urllib.request.urlopen(req, timeout=10).read()
PY
}
