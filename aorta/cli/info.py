"""``aorta env`` and ``aorta mitigations list``: what this host and this install offer."""

from __future__ import annotations

import json
from typing import Any

import typer

from aorta.errors import ExitCode
from aorta.recipe import Registry

from ._options import Json, MitigationsFiles

mitigations_app = typer.Typer(help="The mitigation registry.", no_args_is_help=True)


def env(as_json: Json = False) -> int:
    """Show this host's environment snapshot (what host_env.json records), secrets redacted."""
    from aorta.store import snapshot

    snap = snapshot()
    if as_json:
        print(json.dumps(snap, indent=2))
        return ExitCode.OK
    torch = snap["torch"]
    print(f"host      {snap['host']} ({snap['platform']}, {snap['cpus']} CPUs)")
    print(f"python    {snap['python']}  {snap['executable']}")
    print(f"aorta     {snap['aorta']}")
    print(f"torch     {torch.get('version') or 'not installed'}")
    for vendor, lines in snap["gpus"].items():
        for line in lines if isinstance(lines, list) else [lines]:
            print(f"gpu       {vendor}: {line}")
    if not snap["gpus"]:
        print("gpu       none found (nvidia-smi / rocm-smi)")
    print(f"kernel    {snap['kernel']}")
    box = snap["container"]
    if box["in_container"]:
        print(
            f"container {box['id'] or '(id unknown)'}  image {box['image'] or '(digest unknown)'}"
        )
    print(f"packages  {len(snap['distributions'])} Python distributions (--json lists them)")
    print(f"git       {snap['git_commit'] or '-'}")
    for key, value in snap["env"].items():
        print(f"env       {key}={value}")
    return ExitCode.OK


@mitigations_app.command("list")
def list_mitigations(mitigations_file: MitigationsFiles = None, as_json: Json = False) -> int:
    """List the mitigations and environments a recipe can name."""
    reg = Registry.load(files=mitigations_file or ())
    rows: list[dict[str, Any]] = [
        {
            "name": m.name,
            "env": dict(m.env),
            "vendor": m.vendor,
            "description": m.description,
            "source": m.source,
        }
        for m in reg.mitigations.values()
    ]
    if as_json:
        print(
            json.dumps(
                {
                    "mitigations": rows,
                    "environments": [e.to_dict() for e in reg.environments.values()],
                },
                indent=2,
            )
        )
        return ExitCode.OK
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        variables = " ".join(f"{k}={v}" for k, v in r["env"].items()) or "(none)"
        print(f"{r['name']:<{width}}  {r['vendor']:<6}  {variables}")
    for e in reg.environments.values():
        print(f"environment {e.name}: {e.kind}{' ' + e.image if e.image else ''}")
    return ExitCode.OK
