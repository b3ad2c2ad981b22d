"""Small programs the launcher tests start on their loopback nodes (``python -m tests.launch_worker``).

Every mode writes what it saw into ``$AORTA_LAUNCH_OUTPUT`` (collected into
``combined_traces/node_<rank>/``) so tests assert on files, not on log text.

* ``allreduce`` — gloo process group from torchrun's env, one all_reduce, a fake trace file;
* ``argv [--override K=V ...] [ARGS...]`` — record argv, overrides (argparse ``nargs="*"``), env;
* ``fail-on NODE`` — that node exits 1 at once; the others record that they started, then hang;
* ``hang-on NODE`` — that node (or ``all``) hangs; the others finish;
* ``published-run-dir HEAD_OUT`` — what the sweep engine does on a cluster without a shared file
  system: node 0 writes the run directory under its output; node 1's rank writes its trace into
  the same path (rank 0's, published) on its own disk — simulated here, where the nodes share one
  disk, by removing the head's token so node 1 cannot "see" the head's folder;
* ``fake-run-dir TICKET`` — node 0 writes what a sweep's rank 0 would (a run directory with a
  manifest, a matrix and a stale ``combined_traces`` left by an earlier collection); every node
  writes a trace.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _out() -> Path:
    path = Path(os.environ["AORTA_LAUNCH_OUTPUT"])
    path.mkdir(parents=True, exist_ok=True)
    return path


def _who() -> str:
    return f"node{os.environ['AORTA_NODE_RANK']}_rank{os.environ.get('RANK', 'x')}"


def _record(name: str, data: dict) -> None:
    (_out() / f"{name}.json").write_text(json.dumps(data, indent=1))


def allreduce() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    dist.barrier()
    trace = _out() / "trace"
    trace.mkdir(exist_ok=True)
    (trace / f"rank{rank}.pt.trace.json").write_text(json.dumps({"traceEvents": [], "rank": rank}))
    _record(
        _who(),
        {
            "rank": rank,
            "world_size": world,
            "local_rank": int(os.environ["LOCAL_RANK"]),
            "group_rank": int(os.environ["GROUP_RANK"]),
            "node_rank": int(os.environ["AORTA_NODE_RANK"]),
            "sum": t.item(),
            "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
            "argv": sys.argv[2:],
        },
    )
    print(f"rank {rank}/{world} all_reduce={t.item():g}", flush=True)
    dist.destroy_process_group()


def argv(args: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--override", nargs="*", default=[])
    known, rest = parser.parse_known_args(args)
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("AORTA_", "TEST_")) or k in ("RANK", "MASTER_ADDR")
    }
    _record(
        _who(),
        {"argv": args, "overrides": known.override, "rest": rest, "env": env, "cwd": os.getcwd()},
    )
    print(f"argv {_who()} {len(args)} args", flush=True)


def fail_on(node: str) -> None:
    if os.environ["AORTA_NODE_RANK"] == node:
        # Give the other nodes' interpreters time to start and write their record (what the
        # tests check is gathered after the failure): on a loaded CI box that takes seconds.
        time.sleep(5)
        print("failing on purpose", flush=True)
        sys.exit(1)
    _record(_who(), {"started": time.time(), "pid": os.getpid()})
    print("hanging until stopped", flush=True)
    time.sleep(1000)


def hang_on(node: str) -> None:
    _record(_who(), {"started": time.time(), "pid": os.getpid()})
    if node in (os.environ["AORTA_NODE_RANK"], "all"):
        print("hanging on purpose", flush=True)
        time.sleep(1000)
    print("done", flush=True)


def fake_run_dir(ticket: str) -> None:
    rank = os.environ["AORTA_NODE_RANK"]
    run_id = os.environ["AORTA_RUN_ID"]
    if rank == "0":
        run = _out() / ticket / "probe" / "2026-01-01T00-00-00"
        (run / "combined_traces" / "node_9").mkdir(parents=True, exist_ok=True)
        (run / "combined_traces" / "node_9" / "stale.txt").write_text(
            "from an earlier collection\n"
        )
        (run / "manifest.json").write_text(json.dumps({"status": "complete", "run_id": run_id}))
        (run / "matrix.md").write_text(f"| cell | run {run_id} |\n")
        (run / "cells" / "a" / "trial_0000" / "trace").mkdir(parents=True, exist_ok=True)
        (run / "cells" / "a" / "trial_0000.json").write_text("{}")
        (run / "cells" / "a" / "trial_0000" / "trace" / "rank0.pt.trace.json").write_text("{}")
    trace = _out() / "trace"
    trace.mkdir(exist_ok=True)
    (trace / f"node{rank}.pt.trace.json").write_text(json.dumps({"run_id": run_id}))
    print(f"wrote run {run_id} on node {rank}", flush=True)


def published_run_dir(head_out: str) -> None:
    rank, run_id = os.environ["AORTA_NODE_RANK"], os.environ["AORTA_RUN_ID"]
    run = Path(head_out) / "T-2" / "wl" / run_id
    trial = run / "cells" / "c" / "trial_0000" / "trace"
    trial.mkdir(parents=True, exist_ok=True)
    if rank == "0":
        (run / "manifest.json").write_text(json.dumps({"run_id": run_id}))
    else:
        Path(head_out).parent.joinpath("head.token").unlink()
    (trial / f"rank{int(rank) * 2}.pt.trace.json").write_text(json.dumps({"node": rank}))
    print(f"node {rank} wrote into {run}", flush=True)


def main(args: list[str]) -> None:
    mode, rest = args[0], args[1:]
    if mode == "allreduce":
        allreduce()
    elif mode == "argv":
        argv(rest)
    elif mode == "fail-on":
        fail_on(rest[0])
    elif mode == "hang-on":
        hang_on(rest[0])
    elif mode == "published-run-dir":
        published_run_dir(rest[0])
    elif mode == "fake-run-dir":
        fake_run_dir(rest[0])
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
