#!/usr/bin/env bash
# harvest's benchmark: harvest and a Python peer (aiohttp, benches/peer/peer.py) against the
# built-in OpenRouter simulator on 127.0.0.1 at full speed. One command on a fresh machine: it
# builds harvest (release), installs the peer's pinned dependencies from PyPI into a cached venv,
# raises the open-files limit and runs benches/bench.py.
#
#   scripts/bench.sh full  [options]   concurrency 500, 2000, 5000: harvest, peer, ratio
#   scripts/bench.sh smoke [options]   3,000 prompts at concurrency 500 (CI: --tls); fails only if a run fails
#   --tls: HTTPS as the real API (the simulator's CA trusted by both; harvest on its default
#   HTTP/2, the peer on HTTP/1.1); --http1: harvest over HTTP/1.1 too
#   scripts/bench.sh soak  [options]   1,000,000 short requests at 2,000, bounded by --deadline-s
#   scripts/bench.sh --help            every option (--n, --concurrency, --json PATH, --keep, ...)
#   --floor (with --tls): also the floor client (benches/floor.rs, built here from this tree):
#   harvest's streams read and dropped on harvest's own stack; harvest's CPU per token is
#   stated as a multiple of it
#
# Environment: HARVEST_BIN=path skips the build and uses that binary; HARVEST_PEER_CACHE (default
# ~/.cache/harvest-peers) holds the venv (bench-venv, reinstalled when requirements.txt changes);
# PYTHON (default python3, 3.11 or newer) runs the harness and makes the venv.
set -euo pipefail

HERE="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
CACHE="${HARVEST_PEER_CACHE:-${HOME:-/root}/.cache/harvest-peers}"
VENV="$CACHE/bench-venv"
REQS="$HERE/benches/peer/requirements.txt"

log() { echo "bench.sh: $*" >&2; }

mode="${1:-full}"
case "$mode" in
  -h|--help) exec "$PYTHON" "$HERE/benches/bench.py" --help ;;
esac

# 5,000 streams need a socket on each side: take the hard limit of open files.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || log "could not raise the open-files limit ($(ulimit -n))"

if [ -n "${HARVEST_BIN:-}" ]; then
  BIN="$HARVEST_BIN"
else
  log "building harvest (cargo build --release --bin harvest)"
  (cd "$HERE" && cargo build --release --bin harvest --quiet)
  BIN="${CARGO_TARGET_DIR:-$HERE/target}/release/harvest"
fi

peer_args=()
need_peer=1
[ "$mode" = soak ] && need_peer=0
for arg in "$@"; do [ "$arg" = "--no-peer" ] && need_peer=0; done
if [ "$need_peer" = 1 ]; then
  stamp="$VENV/.requirements.sha256"
  want="$(sha256sum "$REQS" | cut -d' ' -f1)"
  if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing the peer's dependencies into $VENV"
    mkdir -p "$CACHE"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$REQS"
    echo "$want" > "$stamp"
  fi
  peer_args=(--peer-python "$VENV/bin/python")
fi

floor_args=()
args=()
for arg in "$@"; do
  if [ "$arg" = "--floor" ]; then
    log "building the floor client (cargo build --release --bench floor)"
    FLOOR="$(cd "$HERE" && cargo build --release --bench floor --quiet --message-format=json \
      | "$PYTHON" -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "floor" and m.get("executable"):
        print(m["executable"])')"
    if [ -z "$FLOOR" ]; then log "could not build the floor client"; exit 2; fi
    floor_args=(--floor "$FLOOR")
  else
    args+=("$arg")
  fi
done

# ${a[@]+"${a[@]}"}: an empty array under set -u on bash before 4.4.
exec "$PYTHON" "$HERE/benches/bench.py" ${args[@]+"${args[@]}"} --harvest "$BIN" \
  ${peer_args[@]+"${peer_args[@]}"} ${floor_args[@]+"${floor_args[@]}"}
