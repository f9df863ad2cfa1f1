#!/usr/bin/env python3
"""harvest's benchmark harness (Python 3.11 standard library only). Entry point:
`scripts/bench.sh [full|smoke|soak] [options]`, which builds harvest, installs the Python peer's
dependencies and calls this file.

  full   for each concurrency (default 500, 2000, 5000): a fresh simulator at full speed, harvest
         over N synthetic prompts (lognormal output lengths, mean ~1,700 tokens, long tail), then
         a fresh simulator and the Python peer (benches/peer/peer.py) over the same prompts;
         prints completed requests/s, output tokens/s, CPU-s per 1M output tokens, peak RSS, the
         client's and the simulator's CPU use, and the ratio harvest / peer.
  smoke  the same for ~3,000 prompts at one concurrency (CI): fails only when a run fails (a
         non-zero exit or fewer completed than requested), never on timing.
  soak   harvest alone: 1,000,000 short requests at concurrency 2,000, bounded by a deadline
         (SIGINT then); samples RSS and the size of state.json every second and reports first
         (after warm-up), last, peak and growth.

Measurements: CPU time and peak RSS of each client come from wait4() (exact user+sys and
ru_maxrss of the child); /proc/<pid>/stat and /proc/<pid>/status of the client and the simulator
are sampled every --sample-every seconds for the RSS timeline and the simulator's CPU during the
client's run. Completed requests and output tokens are counted from the output JSONL
(`usage.completion_tokens`). Everything listens on 127.0.0.1 only; every child is killed on exit.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TABLE = REPO / "assets" / "providers" / "kimi-k2.5.json"
PEER = REPO / "benches" / "peer" / "peer.py"
MODEL = "moonshotai/kimi-k2.5"
ENDPOINT = "chutes/int4"  # the one endpoint the benchmark's simulator serves
KEY_ENV = "HARVEST_BENCH_KEY"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

# Children still running, killed by cleanup() whatever happens.
_children: list[subprocess.Popen] = []


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# /proc sampling


def proc_cpu_s(pid: int) -> float | None:
    """utime + stime of a live process, in seconds."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces: split after its closing parenthesis.
    rest = s[s.rindex(b")") + 2 :].split()
    try:
        return (int(rest[11]) + int(rest[12])) / CLK_TCK  # fields 14 and 15
    except (IndexError, ValueError):
        return None


def proc_rss_kb(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) in kB."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    rss = hwm = None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    if rss is None or hwm is None:
        return None  # a zombie has no memory lines
    return rss, hwm


class Sampler(threading.Thread):
    """Samples the client and the simulator every `every` seconds until stopped; optionally
    the size and `done` count of a state.json."""

    def __init__(self, client_pid: int, sim_pid: int, every: float, state_json: Path | None):
        super().__init__(daemon=True)
        self.client_pid, self.sim_pid, self.every = client_pid, sim_pid, every
        self.state_json = state_json
        self.samples: list[dict] = []
        self.stop_event = threading.Event()
        self.t0 = time.monotonic()

    def sample(self) -> dict:
        s: dict = {"t": round(time.monotonic() - self.t0, 3)}
        c = proc_cpu_s(self.client_pid)
        r = proc_rss_kb(self.client_pid)
        if c is not None:
            s["client_cpu_s"] = c
        if r is not None:
            s["client_rss_kb"], s["client_hwm_kb"] = r
        sc = proc_cpu_s(self.sim_pid)
        sr = proc_rss_kb(self.sim_pid)
        if sc is not None:
            s["sim_cpu_s"] = sc
        if sr is not None:
            s["sim_rss_kb"] = sr[0]
        if self.state_json is not None:
            try:
                st = self.state_json.stat().st_size
                s["state_bytes"] = st
                with open(self.state_json, "rb") as f:
                    doc = json.loads(f.read())
                s["done"] = doc.get("done")
                s["state"] = doc.get("state")
                # `history` (a point every 5 s) and `events` grow until their caps by design;
                # the rest of the snapshot must not grow at all.
                s["history_len"] = len(doc.get("history") or [])
                s["events_len"] = len(doc.get("events") or [])
                core = {k: v for k, v in doc.items() if k not in ("history", "events")}
                s["state_core_bytes"] = len(json.dumps(core, separators=(",", ":")))
            except (OSError, ValueError):
                pass  # not written yet, or caught mid-rename
        return s

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.samples.append(self.sample())
            self.stop_event.wait(self.every)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=5)


# ---------------------------------------------------------------------------------------------
# children


def spawn(cmd: list[str], *, env: dict, stdout: Path, stderr: Path) -> subprocess.Popen:
    p = subprocess.Popen(
        cmd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=open(stdout, "wb"),
        stderr=open(stderr, "wb"),
        start_new_session=True,  # our Ctrl-C reaches them only through cleanup()
    )
    _children.append(p)
    return p


def wait4(p: subprocess.Popen, timeout_s: float) -> tuple[int, resource.struct_rusage] | None:
    """Reaps `p` with wait4(): (exit code, rusage of the child). None on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            code = os.waitstatus_to_exitcode(status)
            p.returncode = code
            if p in _children:
                _children.remove(p)
            return code, ru
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def stop(p: subprocess.Popen, sig: int = signal.SIGINT, grace_s: float = 10.0) -> None:
    """Signals `p`, waits up to grace_s, then kills it."""
    if p.returncode is not None:
        return
    try:
        p.send_signal(sig)
    except ProcessLookupError:
        pass
    try:
        p.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=10)
    if p in _children:
        _children.remove(p)


def cleanup() -> None:
    for p in list(_children):
        try:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        except Exception:
            pass
    _children.clear()


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ---------------------------------------------------------------------------------------------
# the simulator


def write_table(path: Path, mean: float, sigma: float, tokens_per_event: str | None = None) -> None:
    """The benchmark's provider table: one endpoint of the embedded Kimi K2.5 table, with no
    capacity limit and no faults, and the requested output-length distribution (the simulator
    draws lognormal lengths). `tokens_per_event` ("N" or "mean:M"): what each SSE event
    carries, in place of the table's (Chutes: a mean of 4.2, as recorded traffic shows)."""
    t = json.loads(TABLE.read_text())
    eps = [e for e in t["endpoints"] if e.get("tag") == ENDPOINT]
    if len(eps) != 1:
        raise SystemExit(f"bench: {TABLE} has no endpoint {ENDPOINT}")
    ep = eps[0]
    ep["sim"].pop("capacity", None)
    ep["sim"]["faults"] = {}
    t["endpoints"] = [ep]
    t["output_tokens"] = {"mean": mean, "sigma": sigma}
    if tokens_per_event:
        kind, _, value = tokens_per_event.rpartition(":")
        ep["sim"]["tokens_per_event"] = (
            {"mean": float(value)} if kind == "mean" else {"fixed": int(value)})
    path.write_text(json.dumps(t, indent=1))


class Sim:
    def __init__(self, a: argparse.Namespace, work: Path, name: str, key: str, table: Path):
        self.out = work / f"{name}.sim.stdout"
        self.err = work / f"{name}.sim.stderr"
        cmd = [
            a.harvest, "sim", "--port", "0", "--speed-scale", str(a.speed_scale), "--no-faults",
            "--providers", str(table), "--seed", str(a.seed),
        ]
        # HTTPS as the real API speaks it: the simulator makes a CA at start; both clients
        # trust it (harvest through ca_cert, the peer through --ca-cert).
        self.ca = work / f"{name}.ca.pem" if a.tls else None
        if self.ca:
            cmd += ["--tls", "--ca-out", str(self.ca)]
        env = dict(os.environ, HARVEST_SIM_KEY=key)  # --require-key, without showing it in ps
        self.p = spawn(cmd, env=env, stdout=self.out, stderr=self.err)
        self.base_url = self._wait_url(20.0)
        state = http_json(self.base_url.replace("/api/v1", "/sim/state"), self.ca)
        self.state = state
        ep = state["endpoints"][0]["behaviour"]
        if ep.get("capacity") is not None or state["endpoints"][0]["tag"] != ENDPOINT:
            raise SystemExit(f"bench: unexpected simulator state {state}")

    def _wait_url(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.p.poll() is not None:
                raise SystemExit(f"bench: the simulator exited: {self.err.read_text()[-2000:]}")
            text = self.out.read_text(errors="replace")
            for word in text.split():
                if (word.startswith(("http://127.0.0.1:", "https://127.0.0.1:"))
                        and word.endswith("/api/v1") and (self.ca is None or self.ca.exists())):
                    return word
            time.sleep(0.05)
        raise SystemExit("bench: the simulator did not print its address in time")

    def cpu_s(self) -> float:
        return proc_cpu_s(self.p.pid) or 0.0

    def stop(self) -> None:
        stop(self.p, signal.SIGINT, 10.0)


def http_json(url: str, ca: Path | None = None) -> dict:
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(ca)) if ca else None
    with urllib.request.urlopen(url, timeout=10, context=ctx) as r:
        return json.loads(r.read())


# ---------------------------------------------------------------------------------------------
# inputs


def write_prompts(path: Path, n: int) -> None:
    """N distinct synthetic prompts (the simulator's output depends on the prompt's hash, so
    each gets its own length draw)."""
    topics = [
        "a proof that the square root of 2 is irrational",
        "how a B-tree splits a full node",
        "why TCP needs a three-way handshake",
        "the trade-offs of speculative decoding",
        "an efficient LRU cache in Rust",
        "the history of the Rhine's shipping trade",
        "dynamic programming for the knapsack problem",
        "how lognormal distributions arise",
    ]
    with open(path, "w") as f:
        for i in range(n):
            t = topics[i % len(topics)]
            f.write(json.dumps({"id": f"b{i:07d}", "prompt": f"Explain {t}, step by step (#{i})."}))
            f.write("\n")


def write_job(path: Path, *, base_url: str, out_dir: Path, prompts: Path, concurrency: int,
              max_tokens: int, ca: Path | None = None, http2: bool = False) -> None:
    # OpenRouter routing with a single allowed endpoint (`provider.only`): the least work for
    # the simulator; the faithful policy allows chutes/int4 (native int4).
    path.write_text(
        f'''# written by benches/bench.py
model = "{MODEL}"
base_url = "{base_url}"
api_key_env = "{KEY_ENV}"
output_dir = "{out_dir}"
budget_usd = 1000000.0
concurrency = {concurrency}
routing = "openrouter"
http2 = {"true" if http2 else "false"}
{f'ca_cert = "{ca}"' if ca else ""}

[request]
max_tokens = {max_tokens}

[[dataset]]
name = "bench"
prompts = "{prompts}"
'''
    )


def count_jsonl(path: Path) -> tuple[int, int]:
    """(records, sum of usage.completion_tokens)."""
    n = tokens = 0
    if not path.exists():
        return 0, 0
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a torn last line
            n += 1
            tokens += int((rec.get("usage") or {}).get("completion_tokens") or 0)
    return n, tokens


def count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    n = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return n
            n += b.count(b"\n")


# ---------------------------------------------------------------------------------------------
# one run


def run_client(a: argparse.Namespace, work: Path, client: str, concurrency: int, n: int,
               prompts: Path, table: Path, max_tokens: int) -> dict:
    """Starts a fresh simulator, runs one client (harvest or peer) to the end, measures it."""
    name = f"{client}-c{concurrency}"
    key = "sk-bench-" + secrets.token_hex(12)
    sim = Sim(a, work, name, key, table)
    env = dict(os.environ)
    env[KEY_ENV] = key
    env.setdefault("HARVEST_LOG", "warn")
    try:
        if client == "harvest":
            out_dir = work / f"{name}.out"
            job = work / f"{name}.toml"
            write_job(job, base_url=sim.base_url, out_dir=out_dir, prompts=prompts,
                      concurrency=concurrency, max_tokens=max_tokens, ca=sim.ca,
                      http2=not a.http1)
            cmd = [a.harvest, "run", "--headless", "-c", str(job), "--progress-every", "10"]
            out_jsonl = out_dir / "bench.jsonl"
            rejects = out_dir / "bench.rejects.jsonl"
        elif client == "floor":
            out_jsonl = work / f"{name}.jsonl"
            rejects = None
            cmd = [
                a.floor, "--base-url", sim.base_url, "--prompts", str(prompts),
                "--out", str(out_jsonl), "--model", MODEL, "--max-tokens", str(max_tokens),
                "--concurrency", str(concurrency), "--api-key-env", KEY_ENV,
            ]
            if sim.ca:
                cmd += ["--ca-cert", str(sim.ca)]
        else:
            out_jsonl = work / f"{name}.jsonl"
            rejects = None
            cmd = [
                a.peer_python, str(PEER), "--base-url", sim.base_url, "--prompts", str(prompts),
                "--out", str(out_jsonl), "--model", MODEL, "--max-tokens", str(max_tokens),
                "--concurrency", str(concurrency), "--api-key-env", KEY_ENV,
                "--progress-every", "10",
            ]
            if sim.ca:
                cmd += ["--ca-cert", str(sim.ca)]
        stdout, stderr = work / f"{name}.stdout", work / f"{name}.stderr"
        log(f"{client}: {n:,} prompts at concurrency {concurrency:,} ({sim.base_url})")
        try:
            connections0 = http_json(sim.base_url.replace("/api/v1", "/sim/state"),
                                     sim.ca)["connections"]
        except (OSError, KeyError):
            connections0 = None
        sim_cpu0 = sim.cpu_s()
        t0 = time.monotonic()
        p = spawn(cmd, env=env, stdout=stdout, stderr=stderr)
        sampler = Sampler(p.pid, sim.p.pid, a.sample_every, None)
        sampler.start()
        res = wait4(p, a.run_timeout_s)
        wall = time.monotonic() - t0
        sim_cpu = sim.cpu_s() - sim_cpu0
        sampler.stop()
        timed_out = res is None
        if timed_out:
            log(f"{client}: no end after {a.run_timeout_s:.0f} s; stopping it")
            stop(p, signal.SIGINT, 30.0)
            code, ru = p.returncode, None
        else:
            code, ru = res
        completed, tokens = count_jsonl(out_jsonl)
        # Connections the client opened (over TLS: handshakes), from the simulator's count
        # less the harness's own two queries.
        try:
            c1 = http_json(sim.base_url.replace("/api/v1", "/sim/state"), sim.ca)["connections"]
            connections = c1 - connections0 - 1
        except (OSError, KeyError, TypeError):
            connections = None
        r = {
            "client": client,
            "concurrency": concurrency,
            "requested": n,
            "completed": completed,
            "rejected": count_lines(rejects) if rejects else None,
            "exit_code": code,
            "timed_out": timed_out,
            "wall_s": round(wall, 3),
            "output_tokens": tokens,
            "req_per_s": completed / wall if wall > 0 else 0.0,
            "tok_per_s": tokens / wall if wall > 0 else 0.0,
            "connections": connections,
            "sim_cpu_s": round(sim_cpu, 3),
            "sim_cpu_pct": 100.0 * sim_cpu / wall if wall > 0 else 0.0,
            "sim_peak_rss_mb": max((s.get("sim_rss_kb", 0) for s in sampler.samples), default=0)
            / 1024,
            # RSS and CPU over the run, for a reader who wants to see growth or a plateau.
            "timeline": [
                {k: s.get(k) for k in ("t", "client_rss_kb", "client_cpu_s", "sim_cpu_s",
                                       "sim_rss_kb")}
                for s in sampler.samples
            ],
        }
        if ru is not None:
            cpu = ru.ru_utime + ru.ru_stime
            r.update(
                cpu_s=round(cpu, 3),
                user_s=round(ru.ru_utime, 3),
                sys_s=round(ru.ru_stime, 3),
                peak_rss_mb=ru.ru_maxrss / 1024,
                cpu_pct=100.0 * cpu / wall if wall > 0 else 0.0,
                cpu_s_per_m_tokens=cpu / tokens * 1e6 if tokens else None,
            )
        else:
            hwm = max((s.get("client_hwm_kb", 0) for s in sampler.samples), default=0)
            cpu = max((s.get("client_cpu_s", 0.0) for s in sampler.samples), default=0.0)
            r.update(cpu_s=cpu, peak_rss_mb=hwm / 1024,
                     cpu_pct=100.0 * cpu / wall if wall > 0 else 0.0,
                     cpu_s_per_m_tokens=cpu / tokens * 1e6 if tokens else None)
        ok = code == 0 and not timed_out and completed >= n
        r["ok"] = ok
        if not ok:
            tail = stderr.read_text(errors="replace")[-3000:]
            log(f"{client} FAILED (exit {code}, {completed:,}/{n:,} completed"
                f"{', timed out' if timed_out else ''}); stderr tail:\n{tail}")
        log(f"{client}: {completed:,}/{n:,} in {wall:.1f} s, {tokens:,} output tokens, "
            f"client CPU {r['cpu_s']:.1f} s, sim CPU {sim_cpu:.1f} s")
        return r
    finally:
        sim.stop()


# ---------------------------------------------------------------------------------------------
# reports

ROWS = [
    # key, label, format, ratio?
    ("req_per_s", "completed requests/s", "{:,.1f}", True),
    ("tok_per_s", "output tokens/s", "{:,.0f}", True),
    ("cpu_s_per_m_tokens", "CPU-s per 1M output tokens", "{:,.2f}", True),
    ("peak_rss_mb", "peak RSS (MB)", "{:,.1f}", True),
    ("cpu_pct", "client CPU (% of one core)", "{:,.0f}%", True),
    ("sim_cpu_pct", "simulator CPU (% of one core)", "{:,.0f}%", True),
    ("wall_s", "wall time (s)", "{:,.1f}", True),
    ("connections", "connections opened", "{:,}", True),
    ("output_tokens", "output tokens", "{:,}", False),
    ("completed", "completed / requested", None, False),
]


def fmt(fmt_s: str | None, v) -> str:
    if v is None:
        return "-"
    return fmt_s.format(v)


def ratio(h, p) -> float | None:
    if h is None or p is None or not p:
        return None
    return h / p


def table(runs: list[dict], cores: int) -> str:
    h = next((r for r in runs if r["client"] == "harvest"), None)
    p = next((r for r in runs if r["client"] == "peer"), None)
    fl = next((r for r in runs if r["client"] == "floor"), None)
    first = h or p or fl
    floor_head = f"{'floor':>14}{'harvest/floor':>15}" if fl else ""
    lines = [
        f"concurrency {first['concurrency']:,}: {first['requested']:,} prompts "
        f"({cores} cores; the simulator and the client share them)",
        f"  {'':<31}{'harvest':>14}{'peer':>14}{'harvest/peer':>14}{floor_head}",
    ]
    for key, label, f, has_ratio in ROWS:
        if key == "completed":
            hv = f"{h['completed']:,}/{h['requested']:,}" if h else "-"
            pv = f"{p['completed']:,}/{p['requested']:,}" if p else "-"
            fv = f"{fl['completed']:,}/{fl['requested']:,}" if fl else "-"
            rv = fr = ""
        else:
            hv = fmt(f, h.get(key)) if h else "-"
            pv = fmt(f, p.get(key)) if p else "-"
            fv = fmt(f, fl.get(key)) if fl else "-"
            rr = ratio(h.get(key) if h else None, p.get(key) if p else None)
            rv = f"{rr:.2f}x" if (has_ratio and rr is not None) else ""
            rf = ratio(h.get(key) if h else None, fl.get(key) if fl else None)
            fr = f"{rf:.2f}x" if (has_ratio and rf is not None) else ""
        floor_cells = f"{fv:>14}{fr:>15}" if fl else ""
        lines.append(f"  {label:<31}{hv:>14}{pv:>14}{rv:>14}{floor_cells}")
    # Who was the bottleneck: the process nearest to a full core (both are single-core bound
    # at most on this kind of run), or the machine when both together fill it.
    for r in (h, p, fl):
        if r:
            lines.append(f"  {r['client']}: {bottleneck(r, cores)}")
    for other in (p, fl):
        if h and other and h["output_tokens"] != other["output_tokens"]:
            lines.append(f"  note: output tokens differ (harvest {h['output_tokens']:,}, "
                         f"{other['client']} {other['output_tokens']:,}): not the same outputs")
    return "\n".join(lines)


def summary(results: list[dict]) -> str:
    """One line per concurrency: harvest's figures with the ratio to the peer in brackets."""
    lines = [
        "summary: harvest (harvest/peer)",
        f"  {'concurrency':>11}{'req/s':>18}{'output tok/s':>22}{'CPU-s/1M tok':>18}"
        f"{'peak RSS MB':>18}{'sim CPU':>9}",
    ]
    for res in results:
        h, rt = res["harvest"], res["ratio"]
        if not h:
            continue

        def cell(key: str, f: str) -> str:
            rr = rt.get(key)
            return fmt(f, h.get(key)) + (f" ({rr:.2f}x)" if rr is not None else "")

        lines.append(
            f"  {res['concurrency']:>11,}{cell('req_per_s', '{:,.1f}'):>18}"
            f"{cell('tok_per_s', '{:,.0f}'):>22}{cell('cpu_s_per_m_tokens', '{:.2f}'):>18}"
            f"{cell('peak_rss_mb', '{:,.0f}'):>18}{h['sim_cpu_pct']:>8.0f}%"
        )
    return "\n".join(lines)


def bottleneck(r: dict, cores: int) -> str:
    c, s = r.get("cpu_pct") or 0.0, r.get("sim_cpu_pct") or 0.0
    total = c + s
    if total >= 100.0 * cores * 0.85:
        who = "the machine (client + simulator use all cores)"
    elif s >= 85.0 and s >= c:
        who = "the simulator (near one full core)"
    elif c >= 85.0 and c > s:
        who = "the client (near one full core)"
    else:
        who = "neither at a full core (latency- or I/O-bound)"
    return f"client {c:.0f}% + simulator {s:.0f}% of one core; bottleneck: {who}"


# ---------------------------------------------------------------------------------------------
# modes


def mode_bench(a: argparse.Namespace, work: Path) -> int:
    cores = os.cpu_count() or 1
    concs = [int(c) for c in str(a.concurrency).split(",") if c.strip()]
    table_path = work / "table.json"
    write_table(table_path, a.mean, a.sigma, a.tokens_per_event)
    results = []
    failed = False
    t_start = time.monotonic()
    for c in concs:
        n = a.n if a.n else max(a.min_n, c * a.n_per_slot)
        prompts = work / f"prompts-{n}.jsonl"
        if not prompts.exists():
            write_prompts(prompts, n)
        runs = []
        for client in ("harvest", "peer", "floor"):
            if client == "peer" and a.no_peer:
                continue
            if client == "floor" and not a.floor:
                continue
            if client == "harvest" and a.no_harvest:
                continue
            r = run_client(a, work, client, c, n, prompts, table_path, a.max_tokens)
            runs.append(r)
            failed |= not r["ok"]
        h = next((r for r in runs if r["client"] == "harvest"), None)
        p = next((r for r in runs if r["client"] == "peer"), None)
        fl = next((r for r in runs if r["client"] == "floor"), None)
        ratios = {}
        if h and p:
            for key, _, _, has_ratio in ROWS:
                if has_ratio:
                    rr = ratio(h.get(key), p.get(key))
                    ratios[key] = round(rr, 4) if rr is not None else None
        over_floor = None
        if h and fl:
            rr = ratio(h.get("cpu_s_per_m_tokens"), fl.get("cpu_s_per_m_tokens"))
            over_floor = round(rr, 4) if rr is not None else None
        results.append({"concurrency": c, "n": n, "harvest": h, "peer": p, "floor": fl,
                        "ratio": ratios, "cpu_over_floor": over_floor})
        print(table(runs, cores), flush=True)
        print(flush=True)
    if len(results) > 1:
        print(summary(results), flush=True)
        print(flush=True)
    doc = {
        "mode": a.mode,
        "machine": {"cores": cores, "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0]},
        "settings": {
            "output_tokens_mean": a.mean, "output_tokens_sigma": a.sigma,
            "max_tokens": a.max_tokens, "speed_scale": a.speed_scale, "seed": a.seed,
            "tokens_per_event": a.tokens_per_event,
            "endpoint": ENDPOINT, "peer": "aiohttp + raw SSE (benches/peer/peer.py)",
        },
        "runs": results,
        "ok": not failed,
        "elapsed_s": round(time.monotonic() - t_start, 1),
    }
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=1))
        log(f"figures written to {a.json}")
    print(f"bench {a.mode}: {'ok' if not failed else 'FAILED'} "
          f"({time.monotonic() - t_start:.0f} s)", flush=True)
    return 1 if failed else 0


def mode_soak(a: argparse.Namespace, work: Path) -> int:
    n = a.n or 1_000_000
    c = int(str(a.concurrency).split(",")[0])
    table_path = work / "table.json"
    # Short answers that end with "stop" (mean ~8 tokens), capped at max_tokens.
    write_table(table_path, a.soak_mean, 0.5)
    prompts = work / "prompts.jsonl"
    log(f"soak: writing {n:,} prompts")
    write_prompts(prompts, n)
    key = "sk-bench-" + secrets.token_hex(12)
    sim = Sim(a, work, "soak", key, table_path)
    env = dict(os.environ)
    env[KEY_ENV] = key
    env.setdefault("HARVEST_LOG", "warn")
    out_dir = work / "soak.out"
    job = work / "soak.toml"
    write_job(job, base_url=sim.base_url, out_dir=out_dir, prompts=prompts, concurrency=c,
              max_tokens=a.soak_max_tokens)
    state = out_dir / "state.json"
    stdout, stderr = work / "soak.stdout", work / "soak.stderr"
    try:
        log(f"soak: {n:,} requests at concurrency {c:,}, deadline {a.deadline_s:.0f} s")
        t0 = time.monotonic()
        p = spawn([a.harvest, "run", "--headless", "-c", str(job), "--progress-every", "30",
                   "--drain-grace-s", "10"], env=env, stdout=stdout, stderr=stderr)
        sampler = Sampler(p.pid, sim.p.pid, a.soak_sample_every, state)
        sampler.start()
        res = wait4(p, a.deadline_s)
        interrupted = res is None
        if interrupted:
            log(f"soak: deadline of {a.deadline_s:.0f} s reached; SIGINT")
            p.send_signal(signal.SIGINT)
            res = wait4(p, 60.0)
            if res is None:
                p.kill()
                res = wait4(p, 10.0)
        wall = time.monotonic() - t0
        sampler.stop()
        code, ru = res if res else (None, None)
    finally:
        sim.stop()
    samples = [s for s in sampler.samples if "client_rss_kb" in s]
    completed = count_lines(out_dir / "bench.jsonl")
    # The run proper: the samples while the snapshot says "running" (not the start-up, nor the
    # drain and the end-of-run report, whose peak is reported apart). "First" is the first of
    # them after warm-up: at 10% of the running span.
    running = [s for s in samples if s.get("state") == "running"] or samples
    span0 = running[0]["t"] if running else 0.0
    span1 = running[-1]["t"] if running else 0.0
    warm = [s for s in running if s["t"] >= span0 + 0.1 * (span1 - span0)] or running
    first, last = (warm[0], warm[-1]) if warm else ({}, {})
    rss_first = first.get("client_rss_kb", 0) / 1024
    rss_last = last.get("client_rss_kb", 0) / 1024
    rss_peak = max((s["client_rss_kb"] for s in running), default=0) / 1024
    rss_peak_all = (ru.ru_maxrss / 1024) if ru else max((s["client_hwm_kb"] for s in samples),
                                                        default=0) / 1024
    st = [s for s in warm if "state_core_bytes" in s]
    st_first = st[0]["state_core_bytes"] if st else None
    st_last = st[-1]["state_core_bytes"] if st else None
    st_peak = max((s["state_core_bytes"] for s in st), default=None)
    file_sizes = [s["state_bytes"] for s in sampler.samples if "state_bytes" in s]
    hist_max = max((s.get("history_len", 0) for s in sampler.samples), default=0)
    ev_max = max((s.get("events_len", 0) for s in sampler.samples), default=0)
    growth = (rss_last / rss_first - 1) * 100 if rss_first else None
    st_growth = (st_last / st_first - 1) * 100 if st_first else None
    cpu = (ru.ru_utime + ru.ru_stime) if ru else None
    run_ok = (code == 0) or (interrupted and code == 130)
    rss_flat = growth is not None and growth <= a.rss_tolerance_pct
    st_flat = (st_growth is not None and st_growth <= a.state_tolerance_pct
               and hist_max <= a.history_cap and ev_max <= a.events_cap)
    print(f"soak: {completed:,}/{n:,} requests in {wall:.0f} s "
          f"({completed / wall if wall else 0:,.0f}/s) at concurrency {c:,}"
          f"{'; stopped at the deadline' if interrupted else ''}; exit {code}")
    if cpu is not None:
        print(f"  harvest CPU {cpu:.1f} s ({100 * cpu / wall:.0f}% of one core), "
              f"{1e3 * cpu / max(completed, 1):.3f} ms per request")
    print(f"  RSS (MB): first {rss_first:.1f} (at {first.get('t', 0):.0f} s), last "
          f"{rss_last:.1f} (at {last.get('t', 0):.0f} s), peak {rss_peak:.1f} while running; "
          f"growth last/first {fmt('{:+.1f}%', growth)} -> {'flat' if rss_flat else 'NOT FLAT'} "
          f"(tolerance {a.rss_tolerance_pct:.0f}%)")
    print(f"  RSS peak of the whole process (start-up, drain and end-of-run report included): "
          f"{rss_peak_all:.1f} MB")
    print(f"  snapshot (state.json without history/events, bytes): first {st_first}, last "
          f"{st_last}, peak {st_peak}; growth {fmt('{:+.1f}%', st_growth)}; history points max "
          f"{hist_max} (cap {a.history_cap}), events max {ev_max} (cap {a.events_cap}) -> "
          f"{'flat' if st_flat else 'NOT FLAT'} (tolerance {a.state_tolerance_pct:.0f}%)")
    if file_sizes:
        print(f"  state.json file (bytes): first {file_sizes[0]}, last {file_sizes[-1]}, "
              f"peak {max(file_sizes)}")
    doc = {
        "mode": "soak", "requested": n, "completed": completed, "concurrency": c,
        "wall_s": round(wall, 1), "interrupted_at_deadline": interrupted, "exit_code": code,
        "cpu_s": cpu, "rss_mb": {"first": rss_first, "last": rss_last, "peak": rss_peak,
                                 "peak_whole_process": rss_peak_all,
                                 "growth_pct": growth, "first_at_s": first.get("t"),
                                 "last_at_s": last.get("t")},
        "snapshot_core_bytes": {"first": st_first, "last": st_last, "peak": st_peak,
                                "growth_pct": st_growth},
        "state_json_bytes": {"first": file_sizes[0] if file_sizes else None,
                             "last": file_sizes[-1] if file_sizes else None,
                             "peak": max(file_sizes, default=None)},
        "history_points_max": hist_max, "events_max": ev_max,
        "timeline": [
            {k: s.get(k) for k in ("t", "client_rss_kb", "client_cpu_s", "sim_cpu_s",
                                   "state_bytes", "state_core_bytes", "done", "state")}
            for s in sampler.samples
        ],
        "ok": run_ok and rss_flat and st_flat,
    }
    if a.json:
        Path(a.json).write_text(json.dumps(doc, indent=1))
        log(f"figures written to {a.json}")
    if not run_ok:
        log(f"soak: harvest failed (exit {code}); stderr tail:\n"
            f"{stderr.read_text(errors='replace')[-3000:]}")
    print(f"bench soak: {'ok' if doc['ok'] else 'FAILED'}", flush=True)
    return 0 if doc["ok"] else 1


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/bench.sh",
        description="harvest vs a Python peer against the built-in simulator at full speed",
    )
    p.add_argument("mode", nargs="?", default="full", choices=["full", "smoke", "soak"])
    p.add_argument("--harvest", default=str(REPO / "target" / "release" / "harvest"),
                   help="the harvest binary")
    p.add_argument("--peer-python", default=sys.executable,
                   help="the Python with the peer's requirements installed")
    p.add_argument("--n", type=int, default=None,
                   help="prompts per run (default: full max(--min-n, concurrency x "
                        "--n-per-slot); smoke 3000; soak 1000000)")
    p.add_argument("--min-n", type=int, default=5000)
    p.add_argument("--n-per-slot", type=int, default=2,
                   help="full: at least this many prompts per slot of concurrency")
    p.add_argument("--concurrency", default=None,
                   help="comma-separated (default: full 500,2000,5000; smoke 500; soak 2000)")
    p.add_argument("--mean", type=float, default=1700.0, help="mean output tokens (lognormal)")
    p.add_argument("--sigma", type=float, default=0.7, help="log-space sigma: the long tail")
    p.add_argument("--max-tokens", type=int, default=16384)
    p.add_argument("--speed-scale", type=float, default=0.0,
                   help="simulator pace: 0 = no artificial latency")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokens-per-event", default=None, metavar="N|mean:M",
                   help="what each SSE event carries (default: the built-in table's, a mean of "
                        "4.2 at Chutes, each event written when its last token is decoded)")
    p.add_argument("--tls", action="store_true",
                   help="HTTPS, as the real API: the simulator serves TLS (HTTP/2 and HTTP/1.1 "
                        "by ALPN) and both clients trust its CA")
    p.add_argument("--http1", action="store_true",
                   help="with --tls: harvest speaks HTTP/1.1 (http2 = false) instead of its "
                        "default HTTP/2; the peer (aiohttp) has no HTTP/2 and is always HTTP/1.1")
    p.add_argument("--no-peer", action="store_true", help="harvest only")
    p.add_argument("--no-harvest", action="store_true", help="peer only")
    p.add_argument("--floor", default=None,
                   help="the floor client's binary (benches/floor.rs; bench.sh --floor builds "
                        "it): run it too, and state harvest's CPU per token as a multiple of it")
    p.add_argument("--json", default=None, help="write the figures as JSON here")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--work-dir", default=None, help="default: a new temporary directory")
    p.add_argument("--sample-every", type=float, default=0.5, help="seconds")
    p.add_argument("--run-timeout-s", type=float, default=1800.0,
                   help="a run that has not ended by then is stopped and counted as failed")
    p.add_argument("--deadline-s", type=float, default=900.0, help="soak: SIGINT after this")
    p.add_argument("--soak-max-tokens", type=int, default=16)
    p.add_argument("--soak-mean", type=float, default=8.0, help="soak: mean output tokens")
    p.add_argument("--soak-sample-every", type=float, default=1.0)
    p.add_argument("--rss-tolerance-pct", type=float, default=10.0,
                   help="soak: RSS growth last/first above this fails")
    p.add_argument("--state-tolerance-pct", type=float, default=10.0,
                   help="soak: growth of the snapshot (state.json less history/events) above "
                        "this fails")
    # The supervisor's caps (src/engine/supervisor.rs HISTORY_CAPACITY, EVENT_CAPACITY).
    p.add_argument("--history-cap", type=int, default=360)
    p.add_argument("--events-cap", type=int, default=200)
    a = p.parse_args(argv)
    if a.http1 and not a.tls:
        p.error("--http1 only means something with --tls (plain HTTP is always HTTP/1.1)")
    if a.floor is not None and (not a.tls or a.http1):
        p.error("--floor needs --tls without --http1: the floor is harvest's HTTPS and HTTP/2 "
                "stack (plain HTTP/1.1 goes through harvest's own client)")
    if a.floor is not None and not Path(a.floor).is_file():
        p.error(f"--floor: no binary at {a.floor!r}")
    if a.concurrency is None:
        a.concurrency = {"full": "500,2000,5000", "smoke": "500", "soak": "2000"}[a.mode]
    if a.mode == "smoke" and a.n is None:
        a.n = 3000
    return a


def main(argv: list[str]) -> int:
    a = parse_args(argv)
    if not Path(a.harvest).is_file():
        log(f"no harvest binary at {a.harvest} (cargo build --release --bin harvest)")
        return 2
    nofile = raise_nofile()
    if nofile < 2 * max(int(c) for c in str(a.concurrency).split(",")) + 1024:
        log(f"warning: open-files limit {nofile} is low for this concurrency")

    def on_term(signum, _frame):
        raise KeyboardInterrupt

    # Explicitly, since a shell's background job starts with SIGINT ignored.
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    if a.work_dir:
        work = Path(a.work_dir)
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix=f"harvest-bench-{a.mode}-"))
    log(f"work directory {work}")
    try:
        if a.mode == "soak":
            return mode_soak(a, work)
        return mode_bench(a, work)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        cleanup()
        if a.keep or a.work_dir:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
