"""Hang analysis of a 64-rank job: ``aorta.hang.analyze`` on 64 dumps × 2,000 entries, against
the peers that read the same dumps in the same run.

    .venv/bin/python benchmarks/hang_analyze.py [--ranks 64] [--entries 2000] [--repeat 3]
    .venv/bin/python benchmarks/hang_analyze.py --device 64,1024 [--entries 2000]
    .venv/bin/python benchmarks/hang_analyze.py --decoders   # msgspec against orjson

The dumps are built from an entry of a recorded gloo dump (``tests/data/hang/sleep``), in
torch 2.13's JSON shape (``tests/hang/synth.py``): 2,000 entries per rank (the default
``TORCH_FR_BUFFER_SIZE``), half ``all_reduce`` on the default group, half ``all_to_all`` in
eight expert-parallel groups of eight ranks, the ring buffers wrapped; rank 17 never enters
its group's ``all_to_all`` #1000, its seven peers wait in it, the other 56 ranks wait in the
default group's ``all_reduce`` #1001. Rows (CPU seconds of this process, best of
``--repeat``):

* ``analyze``: :func:`aorta.hang.analyze` on the parsed dumps (what the capture hands it);
* ``load + analyze``: ``aorta hang analyze``'s path: :func:`load_evidence` on a folder of the
  64 JSON files (read, classified, parsed with msgspec), then ``analyze``, with the cyclic
  collector paused until the dumps are freed, as the command runs them;
* ``json.loads`` / ``msgspec.json.decode``: the standard library and msgspec parsing the
  same 64 files' bytes (peers for the parse);
* ``parse_dump (pickle)`` / ``pickle.loads``: the same dumps pickled, read by aorta's
  unpickler that refuses every global and by plain ``pickle.loads`` (what torch's analyzer
  uses);
* ``torch build_db``: ``torch.distributed.flight_recorder``'s analyzer on the parsed dumps.
  On the dumps as gloo writes them it stops with ``KeyError`` (its ``pg_config`` is keyed by
  ``''``: recorded below); it runs once ``pg_config`` is rewritten keyed by group name with
  each group's ranks, as NCCL writes it.

``--device R1,R2``: a device fault at each of those job sizes instead — a TP × PP × DP × EP
job simulated to 2,000 entries per rank (``tests/hang/synth.py``'s ``simulate``: rank 5's
device dies in tensor-parallel ``_all_gather_base`` near the end, its peers complete it and
go on until everything waits on it), one NCCL pickle per rank with the fields as strings,
as NCCL writes them. Each size is timed as the command a user runs, ``aorta hang analyze
FOLDER --json`` in a fresh process: its CPU seconds (user + system) and peak RSS
(``wait4``; the interpreter and its imports included), and ``load_evidence`` + ``analyze``
in this process (CPU seconds, as the rows above), best of ``--repeat``; the answer's
culprits are checked.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import io
import json
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aorta.hang import RankEvidence, analyze, load_evidence, parse_dump
from aorta.hang.dumps import paused_gc
from tests.hang import synth

CULPRIT = 17
EP = 8  # ranks per expert-parallel group


def build(ranks: int, entries: int) -> list[dict[str, Any]]:
    """One wrapped dump per rank (see the module's docstring)."""
    half = entries // 2
    dumps = []
    for rank in range(ranks):
        g = rank // EP
        ep: dict[str, Any] = {
            "name": str(g + 1),
            "desc": "expert_parallel",
            "pg_id": 1,
            "op": "all_to_all",
        }
        stuck_group = g == CULPRIT // EP
        if rank == CULPRIT:
            default, experts = synth.run(half, half), synth.run(half - 1, half - 1, **ep)
        elif stuck_group:
            default, experts = synth.run(half, half), synth.run(half, half - 1, **ep)
        else:
            default, experts = synth.run(half + 1, half, first=2), synth.run(half, half, **ep)
        merged = [e for pair in zip(default, experts, strict=False) for e in pair]
        merged += default[len(experts) :] + experts[len(default) :]
        dumps.append(synth.dump(merged, gloo_ranks=range(ranks)))
    return dumps


def by_name(dumps: list[dict[str, Any]], ranks: int) -> list[dict[str, Any]]:
    """The dumps with ``pg_config`` keyed by group name and its ranks (NCCL's form)."""
    out = []
    for rank, d in enumerate(dumps):
        d = copy.deepcopy(d)
        g = rank // EP
        members = list(range(g * EP, min(ranks, (g + 1) * EP)))
        d["pg_config"] = {
            "0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))},
            str(g + 1): {"name": str(g + 1), "desc": "expert_parallel", "ranks": str(members)},
        }
        out.append(d)
    return out


def cpu(fn: Callable[..., object], repeat: int, setup: Callable[[], object] | None = None) -> float:
    """The least CPU time of ``repeat`` calls of ``fn`` (given what ``setup`` returns, untimed)."""
    best = float("inf")
    for _ in range(repeat):
        arg = setup() if setup else None
        t0 = time.process_time()
        fn() if setup is None else fn(arg)
        best = min(best, time.process_time() - t0)
    return best


def torch_db(dumps: list[dict[str, Any]]) -> Callable[[list[Any]], object] | None:
    """torch's ``build_db`` on parsed dumps, or ``None`` when it does not import."""
    try:
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig
    except ImportError:
        return None
    args = JobConfig().parse_args(["unused", "--allow-incomplete-ranks"])
    # Its findings go to a logging handler made on import: kept, but off the terminal.
    for handler in logging.getLogger("Flight Recorder").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(io.StringIO())

    def run(details: list[Any]) -> object:
        with contextlib.redirect_stdout(io.StringIO()):
            return build_db(dict(details), args, "2.10")

    return run


def _details(dumps: list[dict[str, Any]]) -> list[Any]:
    return [
        (f"fr_{r}", {"host_name": f"h{r}", "rank": r, "entries": d["entries"], "version": "2.10",
                     "pg_config": d["pg_config"]})
        for r, d in enumerate(copy.deepcopy(dumps))
    ]  # fmt: skip


def _command(folder: str) -> object:
    """What ``aorta hang analyze FOLDER`` runs (the collector paused until the dumps are
    freed, as the command does)."""
    with paused_gc():
        return analyze(load_evidence([folder]))


#: Job layouts by size: (tp, pp, dp, ep).
LAYOUTS = {16: (2, 2, 4, 2), 64: (4, 2, 8, 4), 256: (8, 2, 16, 8), 1024: (8, 4, 32, 8)}
FAULTED = 5


def device_folder(ranks: int, entries: int, folder: Path) -> int:
    """Write a device-faulted job's per-rank NCCL pickles into ``folder``; their bytes."""
    groups = synth.layout(*LAYOUTS[ranks])
    per_step = len(synth._program(FAULTED, groups, 1)) - 1  # without the first barrier
    steps = entries // per_step + 2
    at = synth.fault_index(groups, FAULTED, steps - 2, "tp", steps=steps)
    sim = synth.simulate(groups, steps=steps, faults={FAULTED: at})
    assert sim["faulted"] == [FAULTED], sim["faulted"]
    size = 0
    for rank in range(ranks):
        dump = synth.rank_dump(groups, sim, rank, strings=True, keep=entries)
        blob = pickle.dumps(dump, protocol=4)
        Path(folder, f"nccl_trace_rank_{rank}").write_bytes(blob)
        size += len(blob)
    return size


def command_cost(folder: Path) -> tuple[float, float, dict[str, Any]]:
    """``aorta hang analyze FOLDER --json`` in a fresh process: CPU s, peak RSS MiB, report."""
    aorta = str(Path(sys.executable).parent / "aorta")
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([aorta, "hang", "analyze", str(folder), "--json"], stdout=out)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.returncode == 0, proc.returncode
        out.seek(0)
        report = json.loads(out.read())
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, report


def device_rows(sizes: list[int], entries: int, repeat: int) -> None:
    print(f"device fault, {entries} entries per rank; load {os.getloadavg()[0]:.2f}\n")
    print(
        "| ranks | pickles MiB | load + analyze CPU s | the command's CPU s | peak RSS MiB |\n"
        "|---:|---:|---:|---:|---:|"
    )
    answers = []
    for ranks in sizes:
        with tempfile.TemporaryDirectory() as folder:
            size = device_folder(ranks, entries, Path(folder))
            runs = [command_cost(Path(folder)) for _ in range(repeat)]
            inside = cpu(lambda: _command(folder), repeat)
        cpu_s = min(r[0] for r in runs)
        rss = min(r[1] for r in runs)
        report = runs[0][2]
        assert report["culprit_ranks"] == [FAULTED], report["summary"]
        print(f"| {ranks} | {size / 2**20:.0f} | {inside:.2f} | {cpu_s:.2f} | {rss:.0f} |")
        answers.append(f"{ranks} ranks: {report['summary']}")
    print("\n" + "\n".join(answers))


def _parse_all(decode: Callable[[bytes], object], blobs: list[bytes]) -> list[object]:
    with paused_gc():
        return [decode(b) for b in blobs]


def decoder_rows(ranks: int, entries: int, repeat: int) -> None:
    """``load_evidence`` + ``analyze`` with msgspec (aorta's decoder) and orjson swapped in,
    interleaved in one process on one folder (orjson is no dependency: install it to run)."""
    import orjson  # only this comparison needs it

    from aorta.hang import dumps as module

    blobs = [msgspec.json.encode(d) for d in build(ranks, entries)]
    print(
        f"{ranks} JSON dumps, {sum(map(len, blobs)) / 2**20:.0f} MiB; load {os.getloadavg()[0]:.1f}"
    )
    ours = module._DECODER
    swapped = type("Orjson", (), {"decode": staticmethod(orjson.loads)})
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        for r, blob in enumerate(blobs):
            Path(folder, f"fr_{r}.json").write_bytes(blob)
        for _ in range(repeat):
            for name, decoder in (("orjson", swapped), ("msgspec", ours)):
                module._DECODER = decoder  # type: ignore[assignment]
                took = cpu(lambda: _command(folder), 1)
                best[name] = min(best.get(name, took), took)
    module._DECODER = ours
    for name, decode in (("orjson", orjson.loads), ("msgspec", msgspec.json.Decoder().decode)):
        parse = cpu(functools.partial(_parse_all, decode, blobs), repeat)
        print(f"| {name} | load + analyze CPU s {best[name]:.2f} | parse alone {parse:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", help="job sizes of a device fault (of 16, 64, 256, 1024)")
    parser.add_argument("--decoders", action="store_true", help="msgspec against orjson")
    args = parser.parse_args()
    if args.decoders:
        decoder_rows(args.ranks, args.entries, args.repeat)
        return
    if args.device:
        device_rows([int(x) for x in args.device.split(",")], args.entries, args.repeat)
        return
    dumps = build(args.ranks, args.entries)
    blobs = [msgspec.json.encode(d) for d in dumps]
    pickles = [pickle.dumps(d, protocol=2) for d in dumps]
    evidence = [RankEvidence(r, fr=d) for r, d in enumerate(dumps)]
    report = analyze(evidence)
    assert report.culprit_ranks == (CULPRIT,), report.summary
    rows: list[tuple[str, float]] = []
    rows.append(("analyze (parsed dumps)", cpu(lambda: analyze(evidence), args.repeat)))
    with tempfile.TemporaryDirectory() as folder:
        for r, blob in enumerate(blobs):
            Path(folder, f"fr_{r}.json").write_bytes(blob)
        rows.append(("load + analyze (64 JSON files)", cpu(lambda: _command(folder), args.repeat)))
    rows.append(
        ("json.loads (same bytes)", cpu(lambda: [json.loads(b) for b in blobs], args.repeat))
    )
    rows.append(
        (
            "msgspec.json.decode (same bytes)",
            cpu(lambda: [msgspec.json.decode(b) for b in blobs], args.repeat),
        )
    )
    rows.append(
        (
            "parse_dump, pickles (no globals)",
            cpu(lambda: [parse_dump(p) for p in pickles], args.repeat),
        )
    )
    rows.append(
        (
            "pickle.loads (same pickles)",
            cpu(lambda: [pickle.loads(p) for p in pickles], args.repeat),
        )
    )
    db = torch_db(dumps)
    crash = ""
    if db is not None:
        try:
            db(_details(dumps))
        except KeyError as exc:
            crash = f"KeyError {exc}"
        fixed = by_name(dumps, args.ranks)
        rows.append(
            ("torch build_db (pg_config by name)", cpu(db, args.repeat, lambda: _details(fixed)))
        )
    size = sum(len(b) for b in blobs)
    base = rows[0][1]
    print(
        f"{args.ranks} ranks × {args.entries} entries, {size / 2**20:.0f} MiB of JSON "
        f"({sum(len(p) for p in pickles) / 2**20:.0f} MiB pickled); load {os.getloadavg()[0]:.2f}"
    )
    print(f"answer: {report.summary}")
    print("\n| step | CPU s | × analyze |\n|---|---:|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} | {seconds / base:.1f} |")
    if db is not None:
        print(f"\ntorch build_db on the dumps as gloo writes them: {crash or 'ran'}")


if __name__ == "__main__":
    main()
