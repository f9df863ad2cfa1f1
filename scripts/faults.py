"""mitmproxy add-on that injects network faults in front of an OpenAI-compatible server.

Used by harvest's tests (tests/it/peers/llama_server.rs). One fault can be forced per request with the
header `x-fault` (delay:MS, reset, status:CODE, abort:BYTES, trunc:BYTES, hang), taken in turn
from the comma-separated list `fault_cycle` (request i gets entry i mod len; `ok` = no fault),
or drawn at random with the fault_* percentages below. `fault_log` names a file that gets one
line per request with the fault applied. From shared/research/real-peers.md, where each fault
was checked with curl.

Known quirk: after a `trunc` cut, mitmproxy writes an empty chunk for every upstream piece the
hook swallows, so the kept-alive client connection carries stray `0\r\n\r\n` bytes and the next
request on it reads garbage (hyper: "invalid HTTP version parsed"). A client must treat that
as a failed attempt (the proxy did receive the request), not resend it blindly.
"""
import asyncio, random
from mitmproxy import ctx, http

class Faults:
    def __init__(self):
        self.count = 0

    def load(self, loader):
        loader.add_option("fault_cycle", str, "", "comma-separated faults applied in turn, one per request")
        loader.add_option("fault_log", str, "", "file that gets one line per request: the fault applied")
        loader.add_option("fault_delay_ms", int, 0, "delay every request by N ms before forwarding")
        loader.add_option("fault_reset_pct", int, 0, "percent of requests killed (connection dropped, no response)")
        loader.add_option("fault_status_pct", int, 0, "percent of requests answered with fault_status")
        loader.add_option("fault_status", int, 503, "status code for synthetic errors")
        loader.add_option("fault_cut_pct", int, 0, "percent of responses aborted after fault_cut_bytes")
        loader.add_option("fault_cut_bytes", int, 300, "bytes of body passed before a cut")
        loader.add_option("fault_trunc_pct", int, 0, "percent of responses ended cleanly after fault_cut_bytes (no [DONE])")
        loader.add_option("fault_hang_pct", int, 0, "percent of requests never answered (for fault_hang_s seconds)")
        loader.add_option("fault_hang_s", int, 3600, "how long a hung request hangs")

    async def request(self, flow: http.HTTPFlow):
        forced = flow.request.headers.get("x-fault", "")
        o = ctx.options
        if not forced and o.fault_cycle:
            cycle = [f.strip() for f in o.fault_cycle.split(",") if f.strip()]
            forced = cycle[self.count % len(cycle)]
            if forced == "ok":
                forced = ""
        self.count += 1
        if o.fault_log:
            with open(o.fault_log, "a") as f:
                f.write((forced or "ok") + "\n")
        if forced.startswith("delay:"):
            await asyncio.sleep(int(forced[6:]) / 1000)
        elif o.fault_delay_ms:
            await asyncio.sleep(o.fault_delay_ms / 1000)
        if forced == "hang" or (o.fault_hang_pct and random.randrange(100) < o.fault_hang_pct):
            await asyncio.sleep(o.fault_hang_s)
            flow.kill()
            return
        if forced == "reset" or (o.fault_reset_pct and random.randrange(100) < o.fault_reset_pct):
            flow.kill()
            return
        code = None
        if forced.startswith("status:"):
            code = int(forced[7:])
        elif o.fault_status_pct and random.randrange(100) < o.fault_status_pct:
            code = o.fault_status
        if code:
            headers = {"content-type": "application/json"}
            if code == 429:
                headers["retry-after"] = "1"
            flow.response = http.Response.make(
                code, b'{"error":{"message":"injected fault","type":"fault","code":%d}}' % code, headers)
            return
        for m in ("abort", "trunc"):
            if forced.startswith(m + ":"):
                flow.metadata["cut"], flow.metadata["cut_mode"] = int(forced[len(m) + 1:]), m
        if "cut" not in flow.metadata and o.fault_cut_pct and random.randrange(100) < o.fault_cut_pct:
            flow.metadata["cut"], flow.metadata["cut_mode"] = o.fault_cut_bytes, "abort"
        elif "cut" not in flow.metadata and o.fault_trunc_pct and random.randrange(100) < o.fault_trunc_pct:
            flow.metadata["cut"], flow.metadata["cut_mode"] = o.fault_cut_bytes, "trunc"

    def responseheaders(self, flow: http.HTTPFlow):
        cut = flow.metadata.get("cut")
        mode = flow.metadata.get("cut_mode", "abort")
        if cut is None:
            flow.response.stream = True       # unbuffered pass-through keeps SSE timing
            return
        state = {"sent": 0}

        def chunk(data: bytes) -> bytes:
            room = max(0, cut - state["sent"])
            state["sent"] += len(data)
            if len(data) <= room:
                return data
            if mode == "abort":
                # raising inside the stream hook makes mitmproxy drop the client connection at once
                raise ConnectionAbortedError("injected mid-stream abort")
            return data[:room]                # trunc: swallow the rest, end the body cleanly (no [DONE])

        flow.response.stream = chunk

addons = [Faults()]
