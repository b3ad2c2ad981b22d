"""Failure signatures per cell: how often each one named a trial's failure (pure).

Reads the Dataset's ``signature`` variable (cell × trial, ``""`` where none matched; see
:mod:`aorta.run.signatures` for how a trial gets one). :func:`aorta.compare` with
``signature=`` tests one signature's rate against the baseline.

Examples
--------
>>> from aorta.matrix.dataset import build_dataset
>>> from aorta.store.record import TrialRecord
>>> recs = [TrialRecord(cell="a", cell_id="", trial=t, status="workload_failed", passed=False,
...                     signature=s) for t, s in enumerate(["out_of_memory", "out_of_memory", None])]
>>> ds = build_dataset([{"name": "a", "trials": 3}, {"name": "b", "trials": 1}], recs)
>>> signature_counts(ds)  # doctest: +NORMALIZE_WHITESPACE
signature  out_of_memory
cell
a                      2
b                      0
>>> top_signatures(ds).tolist()
['out_of_memory', '']
"""

from __future__ import annotations

import json

import pandas as pd
import xarray as xr

__all__ = ["signature_counts", "signature_hints", "top_signatures"]


def signature_counts(ds: xr.Dataset) -> pd.DataFrame:
    """Trials per cell (rows, in the Dataset's order) and signature (columns, most frequent
    first, then by name); no columns when no trial has a signature or the Dataset predates
    signatures."""
    cells = [str(c) for c in ds.cell.values.tolist()]
    index = pd.Index(cells, name="cell")
    if "signature" not in ds:
        return pd.DataFrame(index=index, columns=pd.Index([], name="signature"), dtype=int)
    sig = ds.signature.transpose("cell", "trial").values.astype(str)
    long = pd.DataFrame(
        {"cell": [c for c in cells for _ in range(sig.shape[1])], "signature": sig.ravel()}
    )
    long = long[long["signature"] != ""]
    table = pd.crosstab(long["cell"], long["signature"]).reindex(index, fill_value=0)
    order = sorted(table.columns, key=lambda s: (-int(table[s].sum()), s))
    table = table[order].astype(int)
    table.columns.name = "signature"
    return table


def top_signatures(ds: xr.Dataset) -> pd.Series:
    """Per cell, the signature that named most of its trials' failures (``""``: none)."""
    counts = signature_counts(ds)
    if counts.shape[1] == 0:
        return pd.Series("", index=counts.index, name="top_failure")
    top = counts.idxmax(axis=1).where(counts.max(axis=1) > 0, "")
    return top.rename("top_failure")


def signature_hints(ds: xr.Dataset) -> dict[str, str]:
    """The one-line hint of each signature seen in the run (``attrs["signature_hints"]``)."""
    raw = ds.attrs.get("signature_hints")
    if not raw:
        return {}
    try:
        return dict(json.loads(raw)) if isinstance(raw, str) else dict(raw)
    except (ValueError, TypeError):
        return {}
