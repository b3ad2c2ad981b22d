"""Every flag of ``aorta`` has an ``AORTA_*`` twin or is listed, with its reason, in
:data:`aorta.cli._options.NO_TWIN` — held both ways on the command typer builds, so a new flag
without a twin, a stale exception or a variable standing for two things fails here."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from aorta import envvars
from aorta.cli import app
from aorta.cli._options import NO_TWIN

ROOT = Path(__file__).resolve().parents[2]


def _options(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """``("sweep run --trials", option)`` for every option of ``command`` and its subcommands
    (``--help`` is click's own, added at parse time, and not among them)."""
    for param in command.params:
        if param.param_type_name == "option":
            flag = next(o for o in param.opts if o.startswith("--"))
            yield " ".join([*path, flag]), param
    for name, sub in getattr(command, "commands", {}).items():
        yield from _options(sub, (*path, name))


OPTIONS = dict(_options(typer.main.get_command(app)))


def _kind(option: Any) -> tuple[object, ...]:
    """What an option's value is: its annotation (a typer of today; click's type before it
    vendored click), flag or not, repeatable or not."""
    descriptor = getattr(option, "type_descriptor", None)
    kind = descriptor.annotation if descriptor is not None else repr(option.type)
    return (repr(kind), option.is_flag, option.multiple)


def test_the_walk_sees_every_command():
    assert {"--version", "sweep run --trials", "sweep extend --trials", "launch --slurm"} <= set(
        OPTIONS
    )
    assert len(OPTIONS) > 100


def test_every_flag_has_a_twin_or_a_reason():
    missing = [key for key, o in OPTIONS.items() if not o.envvar and key not in NO_TWIN]
    assert not missing, (
        f"flags without an AORTA_* twin (give envvar=, or a NO_TWIN reason): {missing}"
    )


def test_every_exception_names_a_flag_that_has_no_twin():
    stale = [key for key in NO_TWIN if key not in OPTIONS or OPTIONS[key].envvar]
    assert not stale, f"NO_TWIN names flags that do not exist or have a twin: {stale}"
    assert all(len(reason) > 20 for reason in NO_TWIN.values())


def test_every_twin_is_named_in_envvars_and_every_name_there_is_used():
    constants = {v for v in vars(envvars).values() if isinstance(v, str) and v.startswith("AORTA_")}
    twins = {o.envvar for o in OPTIONS.values() if o.envvar}
    assert twins <= constants, f"twins not named in aorta/envvars.py: {twins - constants}"
    handed = envvars.ENGINE_PROVIDED | envvars.LAUNCH_PROVIDED
    assert not twins & handed, "a flag's twin is also a variable aorta hands to trials"
    assert constants - twins - handed == set(), "a variable of envvars.py nothing reads"


def test_one_variable_stands_for_one_option():
    """Flags that share a variable (AORTA_JSON, AORTA_OUTPUT, AORTA_TICKET, …) are one option:
    the same flag name, the same kind of value."""
    by_twin: dict[str, set[tuple[object, ...]]] = collections.defaultdict(set)
    for key, option in OPTIONS.items():
        if option.envvar:
            by_twin[option.envvar].add((key.rsplit(" ", 1)[-1], *_kind(option)))
    two = {twin: sorted(map(str, kinds)) for twin, kinds in by_twin.items() if len(kinds) > 1}
    assert not two, f"one variable, several meanings: {two}"


def test_a_twin_sets_its_flag(run_cli, monkeypatch):
    """A twin made by this check (AORTA_RESOLVED, of recipe show --resolved) does what its flag
    does."""
    recipe = str(ROOT / "recipes" / "cpu-smoke.yaml")
    plain, flagged = (
        run_cli("recipe", "show", recipe),
        run_cli("recipe", "show", recipe, "--resolved"),
    )
    monkeypatch.setenv(envvars.RESOLVED, "1")
    assert run_cli("recipe", "show", recipe) == flagged != plain
