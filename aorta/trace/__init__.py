"""Trace analysis: load torch.profiler (Kineto) traces fast and turn them into tables.

>>> import aorta.trace
>>> from aorta.trace.testing import synthetic_trace
>>> trace = synthetic_trace([("kernel", "gemm", 0, 10), ("kernel", "ncclDevKernel_Generic", 5, 10)])
>>> trace.gpu_timeline()[["type", "time ms"]].head(3).to_dict("list")
{'type': ['computation_time', 'exposed_comm_time', 'exposed_memcpy_time'], 'time ms': [0.01, 0.005, 0.0]}
"""

from __future__ import annotations

from .classify import GPU_CLASSES, Rule, Rules, default_rules
from .diff import diff, normalize_kernel_name
from .loader import load, trace_files
from .memory import memory_report
from .merge import MergeReport, merge
from .model import GpuOps, RankInfo, Trace
from .tracelens import TraceLensReport, read_tracelens

__all__ = [
    "GPU_CLASSES",
    "GpuOps",
    "MergeReport",
    "RankInfo",
    "Rule",
    "Rules",
    "Trace",
    "TraceLensReport",
    "default_rules",
    "diff",
    "load",
    "memory_report",
    "merge",
    "normalize_kernel_name",
    "read_tracelens",
    "trace_files",
]
