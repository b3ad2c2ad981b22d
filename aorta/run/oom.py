"""Out of memory, per rank: the figures of an OOM message in a failed trial's logs.

PyTorch's caching allocator says, in one line, what was asked for and what the device had::

    torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total
    capacity of 79.15 GiB of which 1.20 GiB is free. Process 4242 has 77.94 GiB memory in
    use. Of the allocated memory 75.10 GiB is allocated by PyTorch, and 2.11 GiB is reserved
    by PyTorch but unallocated. ...

(``HIP out of memory`` on ROCm, ``XPU``; ``Including non-PyTorch memory, this process has X
memory in use`` in place of ``Process P has X``; PyTorch ≤ 2.0's ``(GPU 0; 15.78 GiB total
capacity; 14.56 GiB already allocated; 3.44 MiB free; 14.69 GiB reserved in total by
PyTorch)``). The other forms name less: the CPU allocator (``DefaultCPUAllocator: can't
allocate memory: you tried to allocate N bytes``), the BLAS libraries
(``CUBLAS_STATUS_ALLOC_FAILED``, ``HIPBLAS_STATUS_ALLOC_FAILED``), NCCL/RCCL (``Failed to CUDA
calloc N bytes``, ``Cuda failure 'out of memory'``), the runtimes (``hipErrorOutOfMemory``,
``cudaErrorMemoryAllocation``). :func:`parse_oom` turns one line into an :class:`OomEvent`
(``None`` for any other line); :func:`scan_oom` reads a trial's logs and keeps each rank's
most telling line — the first with figures, else the first — where the rank is the line's
``[rank3]:`` prefix (PyTorch's for a distributed rank's traceback), ``[default3]:``
(``torchrun --tee``: the local rank) or ``3:`` (``srun --label``), else the rank whose logs
they are. The record keeps them in ``oom`` (:class:`aorta.store.record.OomEvent`), and
:mod:`aorta.matrix.ooms` says which rank ran out across a cell's trials.

Examples
--------
>>> e = parse_oom("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
...     "2.00 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.20 GiB is free. Process 7 "
...     "has 77.94 GiB memory in use. Of the allocated memory 75.10 GiB is allocated by "
...     "PyTorch, and 2.11 GiB is reserved by PyTorch but unallocated.")
>>> e.rank, e.kind, e.device, e.requested_bytes == 2 * 2**30, round(e.free_bytes / 2**30, 2)
(3, 'cuda', 'GPU 3', True, 1.2)
>>> parse_oom("0: RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to "
...           "allocate 1024 bytes. Error code 12 (Cannot allocate memory)").requested_bytes
1024
>>> parse_oom("loss 0.25") is None
True
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from aorta.store.record import OomEvent
from aorta.text import printable

__all__ = ["OOM_KINDS", "parse_oom", "parse_size", "scan_oom"]

#: What ran out: PyTorch's caching allocator (``cuda``, ``hip``, ``xpu``), the CPU allocator,
#: a BLAS library, the collective library, or a runtime call.
OOM_KINDS = ("cuda", "hip", "xpu", "cpu", "blas", "nccl", "runtime")
#: A log line is looked at only up to this many characters (PyTorch's message is ~500).
MAX_LINE_CHARS = 4096
#: The end of each log read for OOM lines, and its beginning (a huge log is not read whole).
TAIL_BYTES, HEAD_BYTES = 8 << 20, 1 << 20

_UNITS = {
    "bytes": 1,
    "B": 1,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
    "TiB": 1 << 40,
    "PiB": 1 << 50,
}
_SIZE = r"(\d+(?:\.\d+)?) ?(bytes|B|KiB|MiB|GiB|TiB|PiB)"
_PREFIX = re.compile(r"^\s*(?:\[(?:rank|default)(\d+)\]:|(\d+): )")
_MARKERS = (
    "out of memory",
    "can't allocate memory",
    "ALLOC_FAILED",
    "OutOfMemory",
    "MemoryAllocation",
    "Failed to CUDA calloc",
    "Failed to HIP calloc",
)
_ALLOCATOR = re.compile(r"\b(CUDA|HIP|XPU) out of memory\. Tried to allocate " + _SIZE)
_DEVICE = re.compile(r"\b(GPU \d+) has a total capacity of " + _SIZE + " of which " + _SIZE)
_PROCESS = re.compile(r"(?:Process \d+ has|this process has) " + _SIZE + " memory in use")
_ALLOCATED = re.compile(r"Of the allocated memory " + _SIZE + " is allocated by PyTorch")
_UNALLOCATED = re.compile(_SIZE + " is reserved by PyTorch but unallocated")
#: PyTorch ≤ 2.0: ``(GPU 0; 15.78 GiB total capacity; 14.56 GiB already allocated; 3.44 MiB
#: free; 14.69 GiB reserved in total by PyTorch)``.
_OLD = re.compile(
    r"\((GPU \d+); "
    + _SIZE
    + r" total capacity; "
    + _SIZE
    + r" already allocated; "
    + _SIZE
    + r" free; "
    + _SIZE
    + r" reserved in total by PyTorch"
)
_CPU = re.compile(r"DefaultCPUAllocator: can't allocate memory: you tried to allocate (\d+) bytes")
_NCCL = re.compile(
    r"Failed to (?:CUDA|HIP) calloc (?:async )?(\d+) bytes|Cuda failure '?out of memory"
)
_BLAS = re.compile(r"\b(?:CU|HIP|ROC)BLAS(?:LT)?_STATUS_ALLOC_FAILED")
_RUNTIME = re.compile(
    r"hipErrorOutOfMemory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY"
    r"|\b(?:CUDA|HIP) error: out of memory|\b(?:CUDA|HIP|XPU) out of memory"
)


def parse_size(number: str, unit: str) -> int:
    """Bytes of a size as PyTorch's ``format_size`` writes it (``2.00 GiB``, ``512 bytes``).

    >>> parse_size("2.00", "GiB"), parse_size("3.44", "MiB"), parse_size("0", "bytes")
    (2147483648, 3607101, 0)
    """
    return round(float(number) * _UNITS[unit])


def _size(rx: re.Pattern[str], text: str, group: int = 1) -> int | None:
    m = rx.search(text)
    return None if m is None else parse_size(m.group(group), m.group(group + 1))


def parse_oom(line: str, *, rank: int | None = None) -> OomEvent | None:
    """The OOM a log line reports, or ``None``.

    Parameters
    ----------
    line
        One line of a log (any prefix; at most :data:`MAX_LINE_CHARS` of it are read).
    rank
        The rank to name when the line carries no rank prefix.

    Returns
    -------
    OomEvent or None
        ``kind`` (one of :data:`OOM_KINDS`), the figures the line gives (bytes; ``None`` where
        it gives none) and the line itself, escaped and capped.
    """
    text = line[:MAX_LINE_CHARS]
    if not any(m in text for m in _MARKERS):
        return None
    prefix = _PREFIX.match(text)
    if prefix is not None:
        rank = int(prefix.group(1) or prefix.group(2))
    fields: dict[str, object] = {}
    if (m := _ALLOCATOR.search(text)) is not None:
        fields["kind"] = m.group(1).lower()
        fields["requested_bytes"] = parse_size(m.group(2), m.group(3))
        if (d := _DEVICE.search(text)) is not None:
            fields["device"] = d.group(1)
            fields["total_bytes"] = parse_size(d.group(2), d.group(3))
            fields["free_bytes"] = parse_size(d.group(4), d.group(5))
        fields["process_in_use_bytes"] = _size(_PROCESS, text)
        fields["allocated_bytes"] = _size(_ALLOCATED, text)
        fields["reserved_unallocated_bytes"] = _size(_UNALLOCATED, text)
        if (o := _OLD.search(text)) is not None:
            reserved = parse_size(o.group(8), o.group(9))
            allocated = parse_size(o.group(4), o.group(5))
            fields |= {
                "device": o.group(1),
                "total_bytes": parse_size(o.group(2), o.group(3)),
                "allocated_bytes": allocated,
                "free_bytes": parse_size(o.group(6), o.group(7)),
                "reserved_unallocated_bytes": max(0, reserved - allocated),
            }
    elif (c := _CPU.search(text)) is not None:
        fields = {"kind": "cpu", "requested_bytes": int(c.group(1)), "device": "cpu"}
    elif (n := _NCCL.search(text)) is not None:
        fields = {"kind": "nccl", "requested_bytes": int(n.group(1)) if n.group(1) else None}
    elif _BLAS.search(text):
        fields = {"kind": "blas"}
    elif _RUNTIME.search(text):
        fields = {"kind": "runtime"}
    else:
        return None
    body = text[prefix.end() :].strip() if prefix is not None else text.strip()
    return OomEvent(rank=rank, line=printable(body)[:500], **fields)


def _lines(path: Path) -> Iterable[str]:
    """The lines of ``path`` that could be OOM lines: its head and tail, bounded."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            spans = (
                [(0, size)]
                if size <= HEAD_BYTES + TAIL_BYTES
                else [
                    (0, HEAD_BYTES),
                    (size - TAIL_BYTES, TAIL_BYTES),
                ]
            )
            for start, length in spans:
                fh.seek(start)
                data = fh.read(length)
                if b"memory" not in data and b"ALLOC_FAILED" not in data and b"calloc" not in data:
                    continue
                for raw in data.splitlines():
                    yield raw[:MAX_LINE_CHARS].decode("utf-8", "replace")
    except OSError:
        return


def scan_oom(paths: Sequence[str | Path], *, rank: int, text: Sequence[str] = ()) -> list[OomEvent]:
    """Each rank's OOM in a trial's ``paths`` (and ``text``, such as the trial's error).

    Per rank the first line with figures (``requested_bytes``) wins, else the first OOM line;
    a line without a rank prefix is ``rank``'s. Sorted by rank. Missing files are skipped;
    each file is read in its first :data:`HEAD_BYTES` and last :data:`TAIL_BYTES` at most.

    >>> [e.kind for e in scan_oom([], rank=0, text=["CUBLAS_STATUS_ALLOC_FAILED when calling"])]
    ['blas']
    """
    best: dict[int, OomEvent] = {}

    def consider(lines: Iterable[str]) -> None:
        for line in lines:
            got = parse_oom(line, rank=rank)
            if got is None or got.rank is None:
                continue
            held = best.get(got.rank)
            if held is None or (held.requested_bytes is None and got.requested_bytes is not None):
                best[got.rank] = got

    consider(t for chunk in text for t in chunk.splitlines())
    for path in paths:
        consider(_lines(Path(path)))
    return [best[r] for r in sorted(best)]
