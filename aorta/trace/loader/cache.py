"""A parsed trace kept beside its file (``<file>.aorta-cache``), keyed by size and mtime.

The cache is an uncompressed ``.npz``-format archive (numpy's own zip of ``.npy`` arrays, no
pickle): the columns of a :class:`~aorta.trace.loader._parse.RankTable` plus one JSON document for
its dictionaries and metadata. It is written atomically (a temporary file, then ``os.replace``); a
directory that cannot be written is not an error — the load reports ``not written: <why>``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ._parse import COLUMNS, RankTable

__all__ = ["CACHE_SUFFIX", "cache_path", "read_cache", "write_cache"]

CACHE_SUFFIX = ".aorta-cache"
#: Bump when the parsed representation changes; older caches are then ignored.
CACHE_VERSION = 6
_META = "meta.json"


def cache_path(path: str | Path) -> Path:
    """Where the cache of the trace at ``path`` lives."""
    path = Path(path)
    return path.with_name(path.name + CACHE_SUFFIX)


def _key(path: Path, *, python_functions: bool) -> dict[str, Any]:
    st = path.stat()
    return {
        "version": CACHE_VERSION,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "python_functions": python_functions,
    }


def read_cache(path: str | Path, *, python_functions: bool) -> RankTable | None:
    """The cached parse of ``path`` if there is one for this exact file and options, else None."""
    path = Path(path)
    target = cache_path(path)
    try:
        # One open for the key and the columns: a load with other options replaces the file
        # between two opens, and its columns came under this file's names and labels.
        with zipfile.ZipFile(target) as archive:
            meta = msgspec.json.decode(archive.read(_META))
            if meta.get("key") != _key(path, python_functions=python_functions):
                return None
            columns = {}
            for name in COLUMNS:
                with archive.open(f"{name}.npy") as member:
                    columns[name] = np.lib.format.read_array(member, allow_pickle=False)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, msgspec.DecodeError):
        return None
    return RankTable(columns=columns, **meta["table"])


def write_cache(table: RankTable, path: str | Path, *, python_functions: bool) -> str:
    """Write the cache of ``path``; returns ``"written"`` or ``"not written: <why>"``."""
    path = Path(path)
    target = cache_path(path)
    meta = {
        "key": _key(path, python_functions=python_functions),
        "table": {
            "cats": table.cats,
            "names": table.names,
            "labels": table.labels,
            "input_dims": table.input_dims,
            "input_types": table.input_types,
            "concrete": table.concrete,
            "input_strides": table.input_strides,
            "comms": table.comms,
            "meta_events": table.meta_events,
            "header": table.header,
            "stats": table.stats,
        },
    }
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with (
            os.fdopen(fd, "wb") as fh,
            zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as archive,
        ):
            for name, values in table.columns.items():
                with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(
                        member, np.ascontiguousarray(values), allow_pickle=False
                    )
            archive.writestr(_META, msgspec.json.encode(meta))
        os.chmod(tmp, path.stat().st_mode & 0o666)  # as readable as the trace itself
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        return f"not written: {exc.strerror or exc}"
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return "written"
