"""Failure-signature matching on a multi-GB log: throughput and peak memory.

    .venv/bin/python benchmarks/signatures.py [--gb 1.0] [--path /tmp/aorta-sig-bench.log]

Generates (once, reused) a training-style log of ``--gb`` GB: step lines, NCCL INFO lines,
warnings, with one ``HIP out of memory`` line 90% of the way in and the
``RuntimeError``/traceback lines a crash leaves at the end. Then, each in a fresh process so
peak RSS is the scan's own:

* **full**: :meth:`SignatureLibrary.scan` of the whole file (``max_bytes=None``): every
  built-in signature, the way a failed trial is classified;
* **bounded**: the default budget (first 128 MiB + last 384 MiB of a larger log);
* **peer**: ``for line in open(...)`` with every signature's regex on each line (what a
  straightforward matcher does), on the first 64 MiB only, extrapolated.

Reports MB/s, wall time, peak RSS (``ru_maxrss``) and the load average (this machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

LINES = [
    "[rank{r}] step {i} | loss {loss:.5f} | lr 3.0e-04 | {ms:.2f} ms/step | tokens/s 48211\n",
    "host-a:1234:1290 [{r}] NCCL INFO Channel 0{r}/16 : 0[{r}] -> 1[{r}] via P2P/IPC/read\n",
    "[rank{r}] /opt/venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:91: "
    "UserWarning: None of the inputs have requires_grad=True. Gradients will be None\n",
]


def generate(path: Path, size: int) -> None:
    block = "".join(
        LINES[i % 3].format(r=i % 8, i=i, loss=1 / (i + 1), ms=100 + i % 17) for i in range(30_000)
    ).encode()
    written = 0
    with open(path, "wb") as fh:
        while written < size:
            if written < 0.9 * size <= written + len(block):
                fh.write(b"torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB\n")
            fh.write(block)
            written += len(block)
        fh.write(b'Traceback (most recent call last):\n  File "train.py", line 9\n')
        fh.write(b"RuntimeError: NCCL error: unhandled system error, NCCL version 2.21.5\n")


def child(mode: str, path: str) -> None:
    from aorta.run.signatures import SignatureLibrary

    lib = SignatureLibrary.load(entry_points=False)
    t0 = time.perf_counter()
    if mode == "peer":
        limit = 64 * 1024 * 1024
        rxs = [(s.name, re.compile(s.regex)) for s in lib.signatures]
        seen: set[str] = set()
        scanned = 0
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                scanned += len(line)
                for name, rx in rxs:
                    if name not in seen and rx.search(line):
                        seen.add(name)
                if scanned >= limit:
                    break
        found = sorted(seen)
    else:
        scanned = os.path.getsize(path) if mode == "full" else min(os.path.getsize(path), 512 << 20)
        found = [m.name for m in lib.scan([path], max_bytes=None if mode == "full" else 512 << 20)]
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"mode": mode, "s": dt, "bytes": scanned, "rss": rss, "found": found}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--path", default="/tmp/aorta-sig-bench.log")
    ap.add_argument("--child", nargs=2)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    path = Path(args.path)
    size = int(args.gb * 1e9)
    if not path.exists() or abs(path.stat().st_size - size) > 10_000_000:
        generate(path, size)
    total = path.stat().st_size
    print(
        f"log: {total / 1e9:.2f} GB; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    for mode in ("full", "bounded", "peer"):
        out = subprocess.run(
            [sys.executable, __file__, "--child", mode, str(path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        r = json.loads(out)
        mbs = r["bytes"] / r["s"] / 1e6
        extra = (
            f" (extrapolated to the whole log: {total / 1e6 / mbs:.0f} s)" if mode == "peer" else ""
        )
        print(
            f"{mode:8s} {r['bytes'] / 1e6:8.0f} MB in {r['s']:7.1f} s = {mbs:6.1f} MB/s, "
            f"peak RSS {r['rss'] / 1e6:5.0f} MB, found {r['found']}{extra}"
        )


if __name__ == "__main__":
    main()
