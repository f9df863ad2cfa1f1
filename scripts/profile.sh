#!/usr/bin/env bash
# Where harvest's CPU goes at real pace (issue #36, item 4), in a form anyone can redo: builds
# the `profiling` profile (the release build with line tables, Cargo.toml), runs the real-pace
# job of BENCHMARKS.md through scripts/bench.sh with harvest under `perf record`, and prints the
# top entries by self time and the same samples grouped by what they do (the JSON parse, the SSE
# framing, HTTP/2, TLS, the runtime, allocation, copies, the kernel, harvest's own code).
#
#   scripts/profile.sh [--out DIR] [--freq HZ] [bench.sh options]
#
# The default job: full --tls --speed-scale 1 --concurrency 500 --n 1000 --mean 600
# --max-tokens 1200 --no-peer (harvest alone; the peer and the floor are bench.sh's business).
# --out DIR keeps perf.data and the reports there (default: a new temporary directory).
# Needs `perf` (linux-tools; on Debian/Ubuntu `apt-get install linux-perf` or
# `linux-tools-$(uname -r)`) and kernel.perf_event_paranoid <= 2 for a user's own process.
# Loopback only, bounded by bench.sh's own run timeout.
set -euo pipefail

HERE="$(cd "$(dirname "$0")/.." && pwd)"
OUT=""
FREQ=1999
job=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --freq) FREQ="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) job+=("$1"); shift ;;
  esac
done
if [ ${#job[@]} -eq 0 ]; then
  job=(full --tls --speed-scale 1 --concurrency 500 --n 1000 --mean 600 --max-tokens 1200 --no-peer)
fi
command -v perf >/dev/null || { echo "profile.sh: perf is not installed (linux-tools)" >&2; exit 2; }
[ -n "$OUT" ] || OUT="$(mktemp -d)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

TARGET="${CARGO_TARGET_DIR:-$HERE/target}"
echo "profile.sh: building harvest (cargo build --profile profiling)" >&2
(cd "$HERE" && cargo build --profile profiling --locked --bin harvest --quiet)
BIN="$TARGET/profiling/harvest"

# bench.sh runs the binary it is given both as the simulator and as the client: only the
# client's `run` goes under perf.
WRAP="$OUT/harvest-under-perf"
cat > "$WRAP" <<EOF
#!/usr/bin/env bash
if [ "\$1" = run ]; then
  exec perf record -q -F $FREQ -o "$OUT/perf.data" -- "$BIN" "\$@"
fi
exec "$BIN" "\$@"
EOF
chmod +x "$WRAP"

HARVEST_BIN="$WRAP" "$HERE/scripts/bench.sh" "${job[@]}" | tee "$OUT/bench.txt"

perf report -i "$OUT/perf.data" --no-children --sort dso,symbol -g none --stdio 2>/dev/null \
  > "$OUT/report.txt"
python3 - "$OUT/report.txt" <<'PY'
import re, sys
rows = []
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s+([0-9.]+)%\s+(\S+)\s+\[[^\]]+\]\s+(.*?)\s*(?:-\s+-\s*)?$", line)
    if m:
        rows.append((float(m.group(1)), m.group(2), m.group(3)))
samples = next((l for l in open(sys.argv[1]) if l.startswith("# Samples")), "").strip("# \n")
print(f"\nprofile: {samples}; top entries by self time")
for pct, dso, sym in rows[:25]:
    print(f"  {pct:5.2f}%  {dso[:18]:18}  {sym[:100]}")
# What each sample does, by the name of its function (first match wins).
groups = [
    ("JSON parse (serde_json)", r"serde_json|serde_core|serde::"),
    ("SSE framing (harvest; UTF-8 checks, memchr)", r"harvest::openrouter::sse|from_utf8|memchr"),
    ("stream accumulation (harvest)", r"StreamAccumulator|harvest::openrouter::response"),
    ("harvest's worker and driver", r"^harvest::|<harvest::"),
    ("HTTP/2 (h2, hyper)", r"\bh2::|hyper|http_body|reqwest"),
    ("TLS (rustls, aws-lc)", r"rustls|aws_lc|aead_|gcm|jent_|ecp_|skip_iv|rol64|ptr_to_le32"),
    ("runtime and cancellation (tokio, mio, epoll)", r"tokio|futures|slab::|mio::|epoll|__libc_recv"),
    ("allocation (malloc, free)", r"malloc|free|_int_|cfree|unlink_chunk"),
    ("copies (memmove, memcpy)", r"memmove|memcpy|memcmp|memset"),
]
total = {}
for pct, dso, sym in rows:
    if dso.startswith("[kernel"):
        name = "kernel (receive path, scheduling)"
    else:
        name = next((g for g, pat in groups if re.search(pat, sym)), "other")
    total[name] = total.get(name, 0.0) + pct
print("\ngrouped by what it does (self time)")
for name, pct in sorted(total.items(), key=lambda kv: -kv[1]):
    print(f"  {pct:5.1f}%  {name}")
PY
echo "profile.sh: perf.data, report.txt and bench.txt in $OUT" >&2
