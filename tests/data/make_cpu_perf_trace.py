"""Record ``tests/data/traces/cpu_perf_ops.pt.trace.json.gz``: a real torch.profiler trace on
the CPU (``record_shapes=True``) of the ops the perf model learned from traces it had not
seen — upsampling (1-D, 2-D nearest, nearest-exact, bilinear), ``linalg_norm``, RMSNorm — and
of one ``aten::mul`` on the same shapes in two memory layouts (a permuted view and a
contiguous tensor), twice each.

A CPU trace has the ops' ``Input Dims`` / ``Input type`` / ``Input Strides`` / ``Concrete
Inputs`` exactly as Kineto records them, so it checks where each model reads its arguments;
it has no GPU kernels, so no kernel time (every row's ``kernel_us`` is 0)::

    .venv/bin/python tests/data/make_cpu_perf_trace.py
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

OUT = Path(__file__).parent / "traces" / "cpu_perf_ops.pt.trace.json.gz"


def main() -> None:
    torch.manual_seed(0)
    heads = torch.randn(2, 9, 4, 8).permute(0, 2, 1, 3)  # (2, 4, 9, 8), strides (288, 8, 32, 1)
    dense = torch.randn(2, 4, 9, 8)  # the same shape, contiguous: (288, 72, 8, 1)
    rotary = torch.randn(1, 1, 9, 8)
    signal, image, rows = torch.randn(2, 3, 16), torch.randn(1, 3, 8, 8), torch.randn(4, 32)
    interpolate = torch.nn.functional.interpolate
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(2):
            torch.mul(heads, rotary)
            torch.mul(dense, rotary)
            interpolate(signal, scale_factor=2, mode="nearest")
            interpolate(image, size=(16, 16), mode="nearest")
            interpolate(image, size=(16, 16), mode="nearest-exact")
            interpolate(image, scale_factor=2, mode="bilinear", align_corners=False)
            torch.linalg.norm(rows, dim=-1)
            torch.nn.functional.rms_norm(rows, (32,), torch.ones(32))
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        doc = json.loads(raw.read_text())
    with gzip.open(OUT, "wt", encoding="utf-8") as out:
        json.dump(doc, out)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
