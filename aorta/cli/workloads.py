"""``aorta workloads list``."""

from __future__ import annotations

import json

import typer

from aorta.errors import ExitCode
from aorta.run import WorkloadCatalog

from ._options import Json

app = typer.Typer(help="Workload plugins.", no_args_is_help=True)


@app.command("list")
def list_(as_json: Json = False) -> int:
    """List the registered workloads (entry-point group ``aorta.workloads``)."""
    rows = WorkloadCatalog().describe()
    if as_json:
        print(json.dumps(rows, indent=2))
        return ExitCode.OK
    for row in rows:
        if "error" in row:
            print(f"{row['name']:<10}  BROKEN: {row['error']}")
            continue
        mode = row["launch_mode"]
        if row["min_world_size"] > 1:
            mode += f" (≥{row['min_world_size']} ranks)"
        print(
            f"{row['name']:<10}  {mode:<24} isolation {row['default_isolation']:<10}  {row['description']}"
        )
    return ExitCode.OK
