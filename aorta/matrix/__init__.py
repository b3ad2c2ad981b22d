"""The matrix as data, pure: the run's xarray Dataset (build, netCDF I/O), statistics,
comparisons against the baseline, trace metrics per cell × trial × rank, the ``ds.aorta``
accessor.
"""
