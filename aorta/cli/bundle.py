"""``aorta bundle RUN --ticket T``: the run as one redacted ``<ticket>-<UTC>.tar.gz``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from aorta import envvars
from aorta.errors import ExitCode
from aorta.report import format_review
from aorta.store import BUNDLE_MANIFEST, plan_bundle, write_bundle

from ._options import Json, option


def bundle(
    run: Annotated[
        Path,
        typer.Argument(help="A run directory.", exists=True, file_okay=False, show_default=False),
    ],
    ticket: Annotated[
        str | None,
        option(
            "--ticket",
            envvars.TICKET,
            "Names the bundle <ticket>-<UTC>.tar.gz (default: the run's ticket).",
        ),
    ] = None,
    review: Annotated[
        bool,
        option(
            "--review",
            envvars.REVIEW,
            "List what would go in (files, sizes, redaction counts); write nothing.",
        ),
    ] = False,
    output: Annotated[
        Path,
        option(
            "--output -o",
            envvars.BUNDLE_OUTPUT,
            "Folder the archive is written into.",
            file_okay=False,
        ),
    ] = Path("."),
    max_size: Annotated[
        str,
        option(
            "--max-size",
            envvars.BUNDLE_MAX_SIZE,
            "Cap on logs, traces and other trial artifacts (e.g. 512M, 2G); records, "
            "matrix, recipe, snapshots and report always go in.",
        ),
    ] = "512M",
    traces: Annotated[
        bool,
        option(
            "--include-traces/--no-traces",
            envvars.BUNDLE_TRACES,
            "Include profiler traces (within --max-size).",
        ),
    ] = True,
    scrub_env_keys: Annotated[
        list[str] | None,
        option(
            "--scrub-env-keys",
            envvars.SCRUB_ENV_KEYS,
            "More variable-name globs to redact, on top of the recipe's; repeatable.",
        ),
    ] = None,
    scrub_paths: Annotated[
        bool | None,
        option(
            "--scrub-paths/--no-scrub-paths",
            envvars.SCRUB_PATHS,
            "Replace the home folder with ~ (default: as the recipe's redaction says).",
            show_default=False,
        ),
    ] = None,
    scrub_ip_addresses: Annotated[
        bool | None,
        option(
            "--scrub-ip-addresses/--no-scrub-ip-addresses",
            envvars.SCRUB_IP_ADDRESSES,
            "Replace IPv4 addresses with <ip> (default: as the recipe's redaction says).",
            show_default=False,
        ),
    ] = None,
    as_json: Json = False,
) -> int:
    """Pack a run for a ticket: records, matrix, recipe, snapshots, logs, report and traces
    (within --max-size), every text file redacted, with a manifest of redaction counts."""
    plan = plan_bundle(
        run,
        ticket=ticket,
        max_size=max_size,
        traces=traces,
        scrub_env_keys=scrub_env_keys or (),
        scrub_paths=scrub_paths,
        scrub_ips=scrub_ip_addresses,
    )
    if review:
        if as_json:
            print(json.dumps(plan.manifest(), indent=2))
        else:
            print(format_review(plan, output=output))
        return ExitCode.OK
    path = write_bundle(plan, output)
    if as_json:
        print(json.dumps({"bundle": str(path), **plan.manifest()}, indent=2))
    else:
        left = len(plan.left_out)
        print(
            f"Wrote {path} ({len(plan.included)} files, {plan.redactions} redactions"
            + (f", {left} left out — see {plan.name}/{BUNDLE_MANIFEST}" if left else "")
            + ")"
        )
    return ExitCode.OK
