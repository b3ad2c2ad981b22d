"""Write the NCCL device-fault goldens of ``tests/hang/test_device.py``: per-rank flight-recorder
dumps of TP × PP × DP × EP jobs whose device faulted on one or two ranks, as NCCL writes them,
with the ranks' logs.

No CPU run can fault a GPU, so these are simulated (``tests/hang/synth.py``'s ``simulate``:
each rank's CPU enqueues up to six collectives ahead of its device; a device runs its
collectives in order and one completes once every member's device reached it; a faulted
device reached its collective — its peers complete it — and never finishes it, or never
launches it at all). Usage, from the repository root::

    .venv/bin/python tests/data/hang/synth_nccl.py      # rewrites tests/data/hang/nccl_*/

Each shape ``S`` goes to ``tests/data/hang/nccl_S/``: ``nccl_trace_rank_<R>`` (a pickle, as
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` names it; ``.json`` for the JSON shape), and where the
shape has them, ``rank<R>.log`` (the watchdog's lines, the rank's own device errors) and
``dmesg_rank<R>.log`` (the node's kernel lines about that rank's GPU).
"""

from __future__ import annotations

import json
import pickle
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

#: shape → (tp, pp, dp, ep), {faulted rank: (step, kind)}, how: strings (entry fields as
#: strings), watchdog (its lines in the logs), launch (the device never launched it), json,
#: device lines per rank (its log) and dmesg lines per rank.
SHAPES: dict[str, dict[str, Any]] = {
    "one": {"dims": (2, 2, 4, 2), "faults": {5: (2, "tp")}},
    "two": {
        "dims": (4, 2, 4, 2),
        "faults": {5: (2, "tp"), 27: (2, "tp")},
        "strings": True,
        "watchdog": True,
    },
    "xid": {
        "dims": (8, 2, 4, 4),
        "faults": {13: (1, "dp")},
        "strings": True,
        "watchdog": True,
        "lines": {
            13: [
                "[rank13]:[E1206 19:01:52.304000 ProcessGroupNCCL.cpp:1895] [PG ID 3 PG GUID "
                "21(DATA_PARALLEL_GROUP) Rank 1] Process group watchdog thread terminated with "
                "exception: CUDA error: an illegal memory access was encountered",
                "gpu-r1:2231:2398 [5] NCCL WARN Cuda failure 'an illegal memory access was "
                "encountered'",
            ]
        },
        "dmesg": {
            13: [
                "[Sat Dec  6 19:01:51 2026] NVRM: Xid (PCI:0000:9a:00): 31, pid=2231, "
                "name=python, Ch 00000018, intr 00000000. MMU Fault: ENGINE GRAPHICS "
                "GPCCLIENT_T1_3 faulted @ 0x7f2e_c4000000. Fault is of type "
                "FAULT_PDE ACCESS_TYPE_VIRT_READ"
            ]
        },
    },
    "amd": {
        "dims": (8, 2, 4, 4),
        "faults": {21: (2, "ep"), 50: (2, "ep")},
        "json": True,
        "lines": {
            21: [
                "[rank21]: RuntimeError: HIP error: an illegal memory access was encountered",
                "[rank21]: HIP kernel errors might be asynchronously reported at some other API "
                "call, so the stacktrace below might be incorrect.",
            ]
        },
        "dmesg": {
            21: [
                "[Sat Dec  6 19:01:50 2026] amdgpu 0000:c1:00.0: amdgpu: [gfxhub] page fault "
                "(src_id:0 ring:24 vmid:3 pasid:32770, for process python pid 4410 thread "
                "python pid 4410)"
            ]
        },
    },
    "launch": {"dims": (2, 2, 4, 2), "faults": {9: (2, "tp")}, "launch": True},
}
STEPS = 3


def nodes(rank: int) -> str:
    """Eight ranks a node."""
    return f"gpu-r{rank // 8}"


def write(shape: str, into: Path = HERE) -> list[int]:
    """Write one shape's folder; the ranks whose device faulted."""
    sys.path.insert(0, str(HERE.parents[2]))
    from tests.hang import synth

    spec = SHAPES[shape]
    groups = synth.layout(*spec["dims"])
    faults = {
        r: synth.fault_index(groups, r, step, kind, steps=STEPS)
        for r, (step, kind) in spec["faults"].items()
    }
    sim = synth.simulate(groups, steps=STEPS, faults=faults, launch=spec.get("launch", False))
    assert sim["faulted"] == sorted(faults), (shape, sim["faulted"])
    dumps = synth.job_dumps(groups, sim, strings=spec.get("strings", False))
    out = into / f"nccl_{shape}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for rank, dump in dumps.items():
        if spec.get("json"):
            # NCCL's JSON dump writes pg_status numbers as strings.
            for status in dump["pg_status"].values():
                for key in status:
                    status[key] = str(status[key])
            (out / f"nccl_trace_rank_{rank}.json").write_text(json.dumps(dump))
        else:
            (out / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, protocol=4))
        lines = list(synth.watchdog_lines(groups, sim, rank)) if spec.get("watchdog") else []
        lines += spec.get("lines", {}).get(rank, [])
        if lines:
            (out / f"rank{rank}.log").write_text("\n".join(lines) + "\n")
        if rank in spec.get("dmesg", {}):
            (out / f"dmesg_rank{rank}.log").write_text("\n".join(spec["dmesg"][rank]) + "\n")
        capture = {"rank": rank, "host": nodes(rank), "pid": 2000 + rank, "notes": []}
        (out / f"capture_{rank}.json").write_text(json.dumps(capture))
    return sim["faulted"]


def main() -> None:
    for shape in sys.argv[1:] or SHAPES:
        faulted = write(shape)
        out = HERE / f"nccl_{shape}"
        size = sum(p.stat().st_size for p in out.iterdir())
        print(f"{shape}: ranks {faulted} faulted; {size / 1024:.0f} KiB in {out}")


if __name__ == "__main__":
    main()
