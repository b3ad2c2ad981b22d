"""The run's Dataset on disk: ``results.nc`` (netCDF-4 through h5netcdf), written atomically
and read back identical.

Examples
--------
>>> import tempfile, pathlib, xarray as xr, numpy as np
>>> ds = xr.Dataset({"status": ("trial", np.array(["ok", "failed"], dtype=object))})
>>> path = write_netcdf(ds, pathlib.Path(tempfile.mkdtemp()) / "results.nc")
>>> read_netcdf(path).status.values.tolist()
['ok', 'failed']
"""

from __future__ import annotations

import os
from pathlib import Path

import xarray as xr
from xarray.backends import H5NetCDFStore
from xarray.backends.locks import HDF5_LOCK

from aorta.errors import UsageError

__all__ = ["read_netcdf", "write_netcdf"]


def write_netcdf(ds: xr.Dataset, path: str | Path) -> Path:
    """Write ``ds`` to ``path`` (netCDF-4 through h5netcdf), atomically.

    Text variables are stored as variable-length strings, so :func:`read_netcdf` gives back
    an identical Dataset (``xarray.testing.assert_identical``).
    """
    path = Path(path)
    encoding = {name: {"dtype": str} for name, var in ds.variables.items() if var.dtype == object}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        if any(var.chunks is not None for var in ds.variables.values()):
            ds.to_netcdf(tmp, engine="h5netcdf", encoding=encoding)
        else:
            # What to_netcdf does with in-memory data, but for its first step: asking dask for
            # its scheduler, which imports distributed wherever it is installed (0.2 s of each
            # sweep process that writes results.nc, for data that is never chunked).
            store = H5NetCDFStore.open(str(tmp), mode="w", lock=HDF5_LOCK)
            try:
                ds.dump_to_store(store, encoding=encoding)
            finally:
                store.close()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def read_netcdf(path: str | Path) -> xr.Dataset:
    """Read a Dataset written by :func:`write_netcdf`, fully into memory (the file is closed).

    Text comes back as object arrays of ``str``, as :func:`build_dataset` makes them.
    """

    try:
        with xr.open_dataset(
            path, engine="h5netcdf", decode_times=False, decode_timedelta=False
        ) as opened:
            ds: xr.Dataset = opened.load()
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable netCDF file ({exc})") from None
    text = {
        name: var.copy(data=var.values.astype(object))
        for name, var in ds.variables.items()
        if var.dtype.kind in "US"
    }
    index_text = {k: v for k, v in text.items() if k in ds.dims}
    ds = ds.assign_coords(index_text)
    for name, var in text.items():
        if name in index_text:
            continue
        if name in ds.coords:
            ds = ds.assign_coords({name: var})
        else:
            ds[name] = var
    return ds
