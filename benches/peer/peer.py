#!/usr/bin/env python3
"""The Python peer of harvest's benchmark: the same job written the way a competent Python
engineer writes it, so that `scripts/bench.sh` can report harvest / peer for every figure.

Client choice: aiohttp with a hand-written SSE loop (plus uvloop and orjson when installed, as
benches/peer/requirements.txt does). The research behind the benchmark
(shared/research/rust-client-cpu.md) measured this as the strongest Python client: ~10.75 CPU-s
per 1M streamed tokens, against ~119 for the openai SDK (AsyncOpenAI), so the peer is aiohttp
and not the SDK. Tuned the way the usual client bottlenecks say (research/anchors-mission.md
sec. 5): one session, a connection pool as large as the concurrency (aiohttp's default is 100),
a 1 MiB read buffer, no per-request client construction.

The job: read a prompt JSONL (`prompt`, `messages` or nothing else, with an `id`), keep at most
`--concurrency` streaming chat completions in flight (asyncio.Semaphore), accumulate content and
reasoning deltas, and write one JSONL record per response (`id`, `text`, `reasoning`,
`finish_reason`, `usage`). Same Authorization, model and max_tokens as the harvest job; usage is
asked for with `stream_options.include_usage` (OpenRouter sends it anyway). Failed attempts
(429, 5xx, mid-stream error, reset) are retried with exponential backoff up to --max-attempts;
prompts that still fail are counted and make the exit status 1.

Prints one JSON line with the totals on stdout at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import ssl
import sys
import time

import aiohttp

try:  # a competent engineer installs these when throughput matters; both are optional here
    import orjson

    def loads(b: bytes):
        return orjson.loads(b)

    def dumps(o) -> bytes:
        return orjson.dumps(o)

except ImportError:  # pragma: no cover - requirements.txt installs orjson
    def loads(b: bytes):
        return json.loads(b)

    def dumps(o) -> bytes:
        return json.dumps(o, ensure_ascii=False).encode()


class Retryable(Exception):
    pass


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8089/api/v1")
    p.add_argument("--prompts", required=True, help="prompt JSONL")
    p.add_argument("--out", required=True, help="output JSONL")
    p.add_argument("--model", default="moonshotai/kimi-k2.5")
    p.add_argument("--max-tokens", type=int, default=16384)
    p.add_argument("--concurrency", type=int, default=500)
    p.add_argument("--api-key-env", default="OPENROUTER_API_KEY")
    p.add_argument("--max-attempts", type=int, default=6)
    p.add_argument("--timeout-s", type=float, default=1800.0, help="whole request")
    p.add_argument("--idle-s", type=float, default=60.0, help="longest silence in a stream")
    p.add_argument("--no-uvloop", action="store_true", help="use the stock asyncio loop")
    p.add_argument("--ca-cert", default=None,
                   help="PEM bundle of a CA to trust for HTTPS (the simulator's --tls CA)")
    p.add_argument("--progress-every", type=float, default=0.0, help="seconds; 0 = quiet")
    return p.parse_args()


def read_prompts(path: str):
    """Yields (id, messages) from a JSONL of `prompt` or `messages` records."""
    with open(path, "rb") as f:
        for n, line in enumerate(f):
            line = line.strip()
            if not line:
                continue
            rec = loads(line)
            if "messages" in rec:
                messages = rec["messages"]
            else:
                messages = [{"role": "user", "content": rec["prompt"]}]
            yield str(rec.get("id", n)), messages


async def stream_one(session: aiohttp.ClientSession, url: str, body: bytes):
    """One streaming attempt. Returns (text, reasoning, finish_reason, usage)."""
    async with session.post(url, data=body) as resp:
        if resp.status != 200:
            detail = (await resp.read())[:300]
            if resp.status == 429 or resp.status >= 500:
                raise Retryable(f"HTTP {resp.status}: {detail!r}")
            raise RuntimeError(f"HTTP {resp.status}: {detail!r}")
        content: list[str] = []
        reasoning: list[str] = []
        finish = None
        usage = None
        done = False
        buf = b""
        # Raw SSE: split the byte stream on newlines ourselves (writes arrive split at any
        # byte), skip comments (": OPENROUTER PROCESSING") and blank lines, parse data lines.
        while not done:
            # The idle timeout is the session's sock_read: no wait_for (a task per read).
            chunk = await resp.content.readany()
            if not chunk:
                break
            buf = buf + chunk if buf else chunk
            start = 0
            while True:
                nl = buf.find(b"\n", start)
                if nl < 0:
                    break
                line = buf[start:nl]
                start = nl + 1
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    break
                ev = loads(data)
                if "error" in ev:
                    raise Retryable(f"stream error: {ev['error']}")
                choices = ev.get("choices")
                if choices:
                    c0 = choices[0]
                    delta = c0.get("delta")
                    if delta:
                        t = delta.get("content")
                        if t:
                            content.append(t)
                        r = delta.get("reasoning")
                        if r:
                            reasoning.append(r)
                    fr = c0.get("finish_reason")
                    if fr:
                        finish = fr
                u = ev.get("usage")
                if u:
                    usage = u
            buf = buf[start:]
        if not done or usage is None:
            raise Retryable("stream ended without usage or [DONE]")
        return "".join(content), "".join(reasoning), finish, usage


async def main_async(a: argparse.Namespace) -> int:
    key = os.environ.get(a.api_key_env, "")
    if not key:
        print(f"peer: ${a.api_key_env} is not set", file=sys.stderr)
        return 2
    url = a.base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    # HTTPS: the default context (system roots), or one that trusts the given CA.
    ssl_ctx = ssl.create_default_context(cafile=a.ca_cert) if a.ca_cert else True
    connector = aiohttp.TCPConnector(limit=a.concurrency, limit_per_host=0, ttl_dns_cache=None,
                                     ssl=ssl_ctx)
    timeout = aiohttp.ClientTimeout(total=a.timeout_s, sock_connect=10, sock_read=a.idle_s)
    sem = asyncio.Semaphore(a.concurrency)
    stats = {"completed": 0, "failed": 0, "retries": 0, "output_tokens": 0}
    out = open(a.out, "wb", buffering=1 << 20)
    started = time.monotonic()

    async def one(session, pid: str, messages) -> None:
        try:
            body = dumps(
                {
                    "model": a.model,
                    "messages": messages,
                    "max_tokens": a.max_tokens,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
            )
            last = None
            for attempt in range(a.max_attempts):
                if attempt:
                    stats["retries"] += 1
                    await asyncio.sleep(min(60.0, 0.5 * 2 ** (attempt - 1)) * random.random())
                try:
                    text, reasoning, finish, usage = await stream_one(session, url, body)
                except (Retryable, aiohttp.ClientError, asyncio.TimeoutError) as e:
                    last = e
                    continue
                out.write(
                    dumps(
                        {
                            "id": pid,
                            "text": text,
                            "reasoning": reasoning,
                            "finish_reason": finish,
                            "usage": usage,
                        }
                    )
                    + b"\n"
                )
                stats["completed"] += 1
                stats["output_tokens"] += int(usage.get("completion_tokens") or 0)
                return
            stats["failed"] += 1
            print(f"peer: {pid} failed: {last}", file=sys.stderr)
        except Exception as e:  # a bug or a non-retryable answer: count it, keep going
            stats["failed"] += 1
            print(f"peer: {pid} failed: {e!r}", file=sys.stderr)
        finally:
            sem.release()

    async def progress() -> None:
        while True:
            await asyncio.sleep(a.progress_every)
            print(
                f"peer: [{time.monotonic() - started:7.1f}s] done {stats['completed']}"
                f" failed {stats['failed']} tokens {stats['output_tokens']}",
                file=sys.stderr,
            )

    async with aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        headers=headers,
        auto_decompress=False,
    ) as session:
        ticker = asyncio.create_task(progress()) if a.progress_every > 0 else None
        tasks: set[asyncio.Task] = set()
        # Acquire before creating the task: at most `concurrency` tasks exist at once, so memory
        # stays bounded however long the prompt file is.
        for pid, messages in read_prompts(a.prompts):
            await sem.acquire()
            t = asyncio.create_task(one(session, pid, messages))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        while tasks:
            await asyncio.gather(*list(tasks))
        if ticker:
            ticker.cancel()
    out.close()
    stats["elapsed_s"] = round(time.monotonic() - started, 3)
    print(json.dumps(stats), flush=True)
    return 1 if stats["failed"] else 0


def main() -> int:
    a = parse_args()
    run = asyncio.run
    if not a.no_uvloop:
        try:
            import uvloop

            run = uvloop.run
        except ImportError:
            pass
    try:
        return run(main_async(a))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
