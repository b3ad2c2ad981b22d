"""Failure-signature matching on a multi-GB log: throughput and peak memory.

    .venv/bin/python benchmarks/signatures.py [--gb 1.0] [--path /tmp/aorta-sig-bench.log]
                                              [--old-mb 256] [--keep]

Generates a training-style log of ``--gb`` GB: step lines, NCCL INFO lines, warnings, with
one ``HIP out of memory`` line 90% of the way in and the ``RuntimeError``/traceback lines a
crash leaves at the end (deleted afterwards unless ``--keep``). Then, each in a fresh process
so peak RSS is the scan's own:

* **full**: :meth:`SignatureLibrary.scan` of the whole file (``max_bytes=None``): every
  built-in signature, the way a failed trial is classified (one RE2 automaton over every
  signature finds candidate lines);
* **bounded**: the default budget (first 128 MiB + last 384 MiB of a larger log);
* **old**: the engine this replaced (Python ``re`` per signature on each 8 MiB block, skipped
  when the block holds none of the signature's literal ``keywords``), on the first
  ``--old-mb`` MB;
* **peer**: ``for line in open(...)`` with every signature's Python ``re`` on each line (what a
  straightforward matcher does), on the first 16 MiB.

Reports MB/s of wall time and of the process's CPU time (this machine is shared: the CPU
figure is what the engine costs, the wall figure what a user waited), peak RSS
(``ru_maxrss``), the load average, and the ratio full / old measured in the same run.
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
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where it is timed
    from aorta.run.signatures import SignatureLibrary

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


def _old_engine(lib: SignatureLibrary, path: str, limit: int) -> tuple[list[str], int]:
    """The scan before RE2: per block, a keyword gate then Python ``re`` per signature."""
    sigs = [
        (s.name, re.compile(s.regex.encode(), re.MULTILINE), [k.encode() for k in s.keywords])
        for s in lib.signatures
    ]
    found: list[str] = []
    pending = list(sigs)
    scanned, carry = 0, b""
    with open(path, "rb") as fh:
        while pending and scanned < limit:
            chunk = fh.read(8 << 20)
            if not chunk:
                break
            scanned += len(chunk)
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            buf, carry = data[:cut], data[cut:]
            present: dict[bytes, bool] = {}
            left = []
            for name, rx, kws in pending:
                if kws and not any(
                    present[w] if w in present else present.setdefault(w, w in buf) for w in kws
                ):
                    left.append((name, rx, kws))
                elif rx.search(buf):
                    found.append(name)
                else:
                    left.append((name, rx, kws))
            pending = left
    return sorted(found), scanned


def child(mode: str, path: str, old_mb: int) -> None:
    from aorta.run.signatures import SignatureLibrary

    lib = SignatureLibrary.load(entry_points=False)
    t0, c0 = time.perf_counter(), time.process_time()
    if mode == "peer":
        limit = 16 * 1024 * 1024
        rxs = [(s.name, re.compile(s.regex, re.MULTILINE)) for s in lib.signatures]
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
    elif mode == "old":
        found, scanned = _old_engine(lib, path, old_mb * 1_000_000)
    else:
        scanned = os.path.getsize(path) if mode == "full" else min(os.path.getsize(path), 512 << 20)
        found = [m.name for m in lib.scan([path], max_bytes=None if mode == "full" else 512 << 20)]
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        json.dumps(
            {"mode": mode, "s": dt, "cpu": cpu, "bytes": scanned, "rss": rss, "found": found}
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--path", default="/tmp/aorta-sig-bench.log")
    ap.add_argument("--old-mb", type=int, default=256, help="MB the old engine scans")
    ap.add_argument("--keep", action="store_true", help="keep the generated log")
    ap.add_argument("--child", nargs=3)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    path = Path(args.path)
    size = int(args.gb * 1e9)
    if not path.exists() or abs(path.stat().st_size - size) > 10_000_000:
        generate(path, size)
    total = path.stat().st_size
    print(
        f"log: {total / 1e9:.2f} GB; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    rates: dict[str, tuple[float, float]] = {}
    try:
        for mode in ("full", "bounded", "old", "peer"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", mode, str(path), str(args.old_mb)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            r = json.loads(out)
            wall, cpu = r["bytes"] / r["s"] / 1e6, r["bytes"] / r["cpu"] / 1e6
            rates[mode] = (wall, cpu)
            print(
                f"{mode:8s} {r['bytes'] / 1e6:6.0f} MB in {r['s']:6.1f} s wall, {r['cpu']:6.1f} s CPU "
                f"= {wall:6.1f} MB/s wall, {cpu:6.1f} MB/s CPU; peak RSS {r['rss'] / 1e6:4.0f} MB; "
                f"found {r['found']}"
            )
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)
    for peer in ("old", "peer"):
        print(
            f"full / {peer}: {rates['full'][0] / rates[peer][0]:.1f}x wall, "
            f"{rates['full'][1] / rates[peer][1]:.1f}x CPU"
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
