"""OOM lines → per-rank figures (aorta.run.oom): PyTorch's allocator messages as its versions
word them, the other libraries' forms, rank prefixes, and sizes through PyTorch's own
formatting (a property over sizes)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aorta.matrix.rank_causes import format_bytes
from aorta.run.oom import parse_oom, parse_size, scan_oom

GIB, MIB = 1 << 30, 1 << 20

HIP = (
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 512.00 MiB. GPU 5 has a total "
    "capacity of 191.98 GiB of which 100.00 MiB is free. Including non-PyTorch memory, this "
    "process has 191.80 GiB memory in use. Of the allocated memory 180.00 GiB is allocated by "
    "PyTorch, with 1.00 GiB allocated in private pools (e.g., CUDA Graphs), and 10.50 GiB is "
    "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
    "setting PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
OLD = (
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total "
    "capacity; 14.56 GiB already allocated; 3.44 MiB free; 14.69 GiB reserved in total by PyTorch)"
)


def test_hip_with_private_pools_and_this_process():
    e = parse_oom(HIP, rank=2)
    assert e is not None and e.kind == "hip" and e.rank == 2 and e.device == "GPU 5"
    assert e.requested_bytes == 512 * MIB and e.free_bytes == 100 * MIB
    assert e.total_bytes == round(191.98 * GIB) and e.process_in_use_bytes == round(191.80 * GIB)
    assert e.allocated_bytes == 180 * GIB and e.reserved_unallocated_bytes == round(10.5 * GIB)


def test_pytorch_before_2_1_words_it_in_parentheses():
    e = parse_oom(OLD)
    assert e is not None and e.kind == "cuda" and e.device == "GPU 0"
    assert e.requested_bytes == 20 * MIB and e.free_bytes == round(3.44 * MIB)
    assert e.allocated_bytes == round(14.56 * GIB)
    assert e.reserved_unallocated_bytes == round(14.69 * GIB) - round(14.56 * GIB)


@pytest.mark.parametrize(
    ("line", "kind", "requested"),
    [
        ("misc/alloc.h:71 NCCL WARN Failed to CUDA calloc 4194304 bytes", "nccl", 4194304),
        ("rccl: NCCL WARN Failed to HIP calloc async 1024 bytes", "nccl", 1024),
        ("NCCL WARN Cuda failure 'out of memory'", "nccl", None),
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
            "blas",
            None,
        ),
        ("HIPBLAS_STATUS_ALLOC_FAILED", "blas", None),
        ("RuntimeError: HIP error: hipErrorOutOfMemory", "runtime", None),
        ("RuntimeError: CUDA error: out of memory", "runtime", None),
    ],
)
def test_the_other_forms_name_what_ran_out(line, kind, requested):
    e = parse_oom(line, rank=0)
    assert e is not None and e.kind == kind and e.requested_bytes == requested


@pytest.mark.parametrize(
    ("prefix", "rank"), [("[rank7]: ", 7), ("[default3]:", 3), ("12: ", 12), ("", 9)]
)
def test_the_rank_comes_from_the_prefix_else_the_logs_owner(prefix, rank):
    e = parse_oom(prefix + OLD, rank=9)
    assert e is not None and e.rank == rank and e.line.startswith("RuntimeError")


def test_ordinary_lines_are_not_ooms():
    for line in ("loss 0.25", "memory: 12 GiB", "Out of patience", ""):
        assert parse_oom(line) is None


def test_scan_keeps_each_ranks_line_with_figures(tmp_path):
    log = tmp_path / "stderr.log"
    log.write_text(
        "[rank1]: RuntimeError: CUDA error: out of memory\n"
        f"[rank1]: {OLD}\n"
        "[rank0]: ok\n"
        f"[rank3]: {HIP}\n"
    )
    found = scan_oom([log, tmp_path / "missing.log"], rank=0)
    assert [(e.rank, e.kind, e.requested_bytes) for e in found] == [
        (1, "cuda", 20 * MIB),
        (3, "hip", 512 * MIB),
    ]


@given(st.integers(min_value=0, max_value=1 << 52))
def test_sizes_survive_pytorchs_formatting(n):
    """A size written as PyTorch writes it (two decimals of its unit) reads back within the
    rounding of those two decimals."""
    text = format_bytes(n)
    number, unit = text.split(" ")
    got = parse_size(number, unit)
    step = {"bytes": 1, "KiB": 1 << 10, "MiB": MIB, "GiB": GIB, "TiB": 1 << 40, "PiB": 1 << 50}[
        unit
    ]
    assert abs(got - n) <= step * 0.005 + 1
    line = f"CUDA out of memory. Tried to allocate {text}. GPU 0 has a total capacity of {text} of which 0 bytes is free."
    e = parse_oom(line)
    assert e is not None and e.requested_bytes == got and e.free_bytes == 0


def test_a_records_oom_lines_leave_the_run_redacted():
    from aorta.store.record import RankOutcome, TrialRecord
    from aorta.store.redact import Redactor

    secret = "hf_abcdefghijklmnopqrstuvwxyz123456"
    line = f"RuntimeError: CUDA out of memory (token {secret})"
    e = parse_oom(line, rank=1)
    assert e is not None and secret in e.line
    rank = RankOutcome(rank=1, status="workload_failed", passed=False, oom=[e])
    rec = TrialRecord(
        cell="a", cell_id="", trial=0, status="workload_failed", passed=False, oom=[e], ranks=[rank]
    )
    clean = Redactor().with_values([secret]).record(rec)
    assert secret not in clean.model_dump_json()
    assert clean.oom[0].kind == "runtime" and clean.ranks[0].oom[0].rank == 1
