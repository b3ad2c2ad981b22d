"""Peak RSS of ``aorta hang analyze`` on hostile and real-shaped dumps, with and without the
memory bound (``--max-memory``), each run in a fresh process (``os.wait4``'s rusage).

Hostile: pickles of one-byte opcodes that each make an empty dict (~72 times their size in
memory; each under the 32 MiB pickle limit). ``--max-memory 1048576`` (1 PiB) is the run as
it was before the bound (nothing refused); the bounded run refuses the folder once the
charges pass the limit, and says so in one line. Real-shaped: the 2,000-entry dumps of
``benchmarks/hang_analyze.py`` as JSON, read under the default bound: what each is charged
(:func:`aorta.hang.dumps.read_cost`) against what it takes.

    .venv/bin/python benchmarks/hang_memory.py [--files 8] [--mib 4] [--ranks 64]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import msgspec

# The sibling scripts by their own names, as every benchmark imports them (``trace_load``), so
# that each module has one name (mypy refuses a file known by two); hang_analyze puts the
# repository root on the path for aorta and tests.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hang_analyze import build

from aorta.hang.dumps import read_cost

AORTA = str(Path(sys.executable).parent / "aorta")


def peak_rss(*args: str) -> tuple[float, int, str]:
    """Peak RSS (MiB) of ``aorta *args`` in its own process, its exit code, its last line."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([AORTA, *args], stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    return usage.ru_maxrss / 1024, proc.returncode, lines[-1] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--mib", type=int, default=4)
    parser.add_argument("--ranks", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        hostile = Path(tmp, "hostile")
        hostile.mkdir()
        blob = b"\x80\x04}(\x8c\x07entries]\x8c\x04junk(" + b"}" * (args.mib << 20) + b"lu."
        for r in range(args.files):
            (hostile / f"nccl_trace_rank_{r}").write_bytes(blob)
        size = args.files * len(blob) / 2**20
        print(f"hostile: {args.files} pickles of {len(blob) / 2**20:.0f} MiB ({size:.0f} MiB)")
        print("\n| run | exit | peak RSS MiB | × the files | last line |\n|---|---:|---:|---:|---|")
        for label, limit in (("unbounded (--max-memory 1048576)", "1048576"),
                             ("--max-memory 1", "1"), ("default (8 GiB)", None)):  # fmt: skip
            extra = ["--max-memory", limit] if limit else []
            rss, code, line = peak_rss("hang", "analyze", str(hostile), *extra)
            print(f"| {label} | {code} | {rss:,.0f} | {rss / size:.0f} | {line[:150]} |")
        real = Path(tmp, "real")
        real.mkdir()
        dumps = build(args.ranks, 2000)
        charged = 0
        for r, d in enumerate(dumps):
            data = msgspec.json.encode(d)
            (real / f"fr_{r}.json").write_bytes(data)
            charged += read_cost(data, "json").held + 400 * len(d["entries"])
        total = sum(p.stat().st_size for p in real.iterdir()) / 2**20
        rss, code, line = peak_rss("hang", "analyze", str(real))
        base, _, _ = peak_rss("hang", "analyze", str(hostile / "nccl_trace_rank_0"), "--json")
        print(f"\nreal-shaped: {args.ranks} JSON dumps × 2,000 entries ({total:.0f} MiB)")
        print(f"exit {code}, peak RSS {rss:,.0f} MiB; charged {charged / 2**20:,.0f} MiB held")
        print(f"(one hostile file's run, for scale: {base:,.0f} MiB)")


if __name__ == "__main__":
    main()
