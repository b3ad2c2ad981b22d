"""GPU peaks for the roofline: a table of devices (``devices.json``, each number with its public
source) and the choice of a trace's device.

A device is a mapping in TraceLens's arch-file shape: ``mem_bw_gbps`` (HBM GB/s) and
``max_achievable_tflops`` keyed ``<unit>_<precision>`` (``matrix_bf16``, ``vector_fp32``, ...).
The table holds dense datasheet peaks; a TraceLens arch file (measured maximum-achievable
numbers) is accepted as is.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .model import Trace

__all__ = ["Device", "device_names", "device_of", "get_device", "resolve_device"]

#: What ``device=`` accepts: ``None`` (the trace's own), ``False`` (none), a name, a mapping.
Device = str | Mapping[str, Any] | Literal[False] | None


@cache
def _table() -> dict[str, dict[str, Any]]:
    # beside this module (a plain read: importlib.resources costs ~1 ms more on first use)
    text = Path(__file__).with_name("devices.json").read_text(encoding="utf-8")
    devices: dict[str, dict[str, Any]] = json.loads(text)["devices"]
    return devices


def device_names() -> list[str]:
    """The devices in the table.

    Examples
    --------
    >>> device_names()
    ['H100', 'H200', 'B200', 'A100', 'MI300X', 'MI325X', 'MI355X', 'MI250X']
    """
    return list(_table())


def get_device(name: str) -> dict[str, Any]:
    """The table's entry for ``name`` (case-insensitive; a GPU name such as ``"AMD Instinct
    MI300X VF"`` or ``"NVIDIA H100 80GB HBM3"`` works too), with ``name`` set.

    Raises
    ------
    ValueError
        Unknown device (the message lists the known ones).

    Examples
    --------
    >>> d = get_device("AMD Instinct MI300X VF")
    >>> d["name"], d["mem_bw_gbps"], d["max_achievable_tflops"]["matrix_bf16"]
    ('MI300X', 5300, 1307.4)
    """
    key = _match(name)
    if key is None:
        raise ValueError(f"unknown device {name!r}: known devices are {', '.join(_table())}")
    # A deep copy: the entry's peaks are a dict of the cached table, and a caller that edits
    # its own copy (a notebook trying another peak) would change every later answer.
    return {"name": key, **copy.deepcopy(_table()[key])}


def _match(name: str) -> str | None:
    upper = name.upper()
    for key in _table():
        if upper == key.upper():
            return key
    for key, patterns in _patterns():
        if any(_mentions(upper, p) for p in patterns):
            return key
    return None


@cache
def _patterns() -> list[tuple[str, list[str]]]:
    """Each device's name patterns (upper case), the longest first (MI250X before MI250)."""
    return [
        (key, sorted((p.upper() for p in entry.get("match", [])), key=len, reverse=True))
        for key, entry in _table().items()
    ]


def _mentions(name: str, pattern: str) -> bool:
    """Whether ``name`` holds ``pattern`` as a word of its own: no letter or digit before it,
    no digit after it (``MI300X`` in ``AMD INSTINCT MI300X VF``, not ``H100`` in ``GH1000``).
    Plain string searches: no regular expression to compile on a fresh process's first use.

    >>> _mentions("NVIDIA H100 80GB HBM3", "H100"), _mentions("GH1000", "H100"), _mentions("MI250X", "MI250")
    (True, False, True)
    """
    at = name.find(pattern)
    while at >= 0:
        before = name[at - 1] if at else " "
        after = name[at + len(pattern)] if at + len(pattern) < len(name) else " "
        if not (before.isalnum() and before.isascii()) and not after.isdigit():
            return True
        at = name.find(pattern, at + 1)
    return False


def device_of(trace: Trace) -> dict[str, Any] | None:
    """The table's entry for the GPU named in the trace's ``deviceProperties`` (the first known
    one over all ranks), or ``None``.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("kernel", "k", 0, 1)], header={"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]})
    >>> device_of(t)["name"]
    'H100'
    """
    for rank in trace.ranks:
        for props in trace.info(rank).device_properties:
            name = props.get("name") if isinstance(props, Mapping) else None
            if isinstance(name, str) and _match(name):
                return get_device(name)
    return None


def resolve_device(trace: Trace, device: Device) -> dict[str, Any] | None:
    """The device mapping for ``device=`` (see :func:`aorta.trace.perf.perf_ops`).

    Raises
    ------
    ValueError
        An unknown name, or a mapping without ``mem_bw_gbps``/``max_achievable_tflops``.

    Examples
    --------
    >>> from aorta.trace.testing import synthetic_trace
    >>> t = synthetic_trace([("kernel", "k", 0, 1)])
    >>> resolve_device(t, None) is None, resolve_device(t, "mi300x")["name"]
    (True, 'MI300X')
    >>> resolve_device(t, {"name": "mine", "mem_bw_gbps": 5300, "max_achievable_tflops": {"matrix_bf16": 708}})["name"]
    'mine'
    """
    if device is None:
        return device_of(trace)
    if device is False:
        return None
    if isinstance(device, str):
        return get_device(device)
    if isinstance(device, Mapping):
        missing = [k for k in ("mem_bw_gbps", "max_achievable_tflops") if k not in device]
        if missing or not isinstance(device.get("max_achievable_tflops"), Mapping):
            raise ValueError(
                "device mapping needs mem_bw_gbps and max_achievable_tflops "
                f"(TraceLens's arch-file shape); missing: {', '.join(missing) or 'a mapping of peaks'}"
            )
        return {"name": str(device.get("name", "custom")), **device}
    raise ValueError(f"device must be a name, a mapping, None or False, not {device!r}")
