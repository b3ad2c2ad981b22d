"""Hang analysis of a 64-rank job: ``aorta.hang.analyze`` on 64 dumps × 2,000 entries, against
the peers that read the same dumps in the same run.

    .venv/bin/python benchmarks/hang_analyze.py [--ranks 64] [--entries 2000] [--repeat 3]

The dumps are built from an entry of a recorded gloo dump (``tests/data/hang/sleep``), in
torch 2.13's JSON shape (``tests/hang/synth.py``): 2,000 entries per rank (the default
``TORCH_FR_BUFFER_SIZE``), half ``all_reduce`` on the default group, half ``all_to_all`` in
eight expert-parallel groups of eight ranks, the ring buffers wrapped; rank 17 never enters
its group's ``all_to_all`` #1000, its seven peers wait in it, the other 56 ranks wait in the
default group's ``all_reduce`` #1001. Rows (CPU seconds of this process, best of
``--repeat``):

* ``analyze``: :func:`aorta.hang.analyze` on the parsed dumps (what the capture hands it);
* ``load + analyze``: ``aorta hang analyze``'s path: :func:`load_evidence` on a folder of the
  64 JSON files (read, classified, parsed with orjson), then ``analyze``, with the cyclic
  collector paused until the dumps are freed, as the command runs them;
* ``json.loads``: the standard library parsing the same 64 files' bytes (a peer for the
  parse);
* ``parse_dump (pickle)`` / ``pickle.loads``: the same dumps pickled, read by aorta's
  unpickler that refuses every global and by plain ``pickle.loads`` (what torch's analyzer
  uses);
* ``torch build_db``: ``torch.distributed.flight_recorder``'s analyzer on the parsed dumps.
  On the dumps as gloo writes them it stops with ``KeyError`` (its ``pg_config`` is keyed by
  ``''``: recorded below); it runs once ``pg_config`` is rewritten keyed by group name with
  each group's ranks, as NCCL writes it.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import logging
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aorta.hang import RankEvidence, analyze, load_evidence, parse_dump
from aorta.hang.dumps import paused_gc
from tests.hang import synth

CULPRIT = 17
EP = 8  # ranks per expert-parallel group


def build(ranks: int, entries: int) -> list[dict]:
    """One wrapped dump per rank (see the module's docstring)."""
    half = entries // 2
    dumps = []
    for rank in range(ranks):
        g = rank // EP
        ep = {"name": str(g + 1), "desc": "expert_parallel", "pg_id": 1, "op": "all_to_all"}
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


def by_name(dumps: list[dict], ranks: int) -> list[dict]:
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


def cpu(fn: Callable[[], object], repeat: int, setup: Callable[[], object] | None = None) -> float:
    best = float("inf")
    for _ in range(repeat):
        arg = setup() if setup else None
        t0 = time.process_time()
        fn() if setup is None else fn(arg)  # type: ignore[call-arg]
        best = min(best, time.process_time() - t0)
    return best


def torch_db(dumps: list[dict]) -> Callable[[list], object] | None:
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

    def run(details: list) -> object:
        with contextlib.redirect_stdout(io.StringIO()):
            return build_db(dict(details), args, "2.10")

    return run


def _details(dumps: list[dict]) -> list:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    dumps = build(args.ranks, args.entries)
    blobs = [orjson.dumps(d) for d in dumps]
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
        ("orjson.loads (same bytes)", cpu(lambda: [orjson.loads(b) for b in blobs], args.repeat))
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
