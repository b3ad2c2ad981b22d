"""The options of a sweep: one frozen value, its defaults defined here once.

:func:`aorta.sweep` takes one as ``options=``, its keywords (``output=``, ``progress=`` …)
overriding it (:func:`run_options`); the planner (:func:`aorta.run.prepare.prepare`) and the
loop read the same value; ``aorta sweep run`` builds one from its flags. What a sweep acts on
— the recipe, ``resume=``, ``extend_to=`` — is :func:`aorta.sweep`'s own argument, not an option.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypedDict

from aorta.keywords import with_keywords

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from aorta.report.progress import ProgressMode, Reporter
    from aorta.run.workload import Workload

__all__ = ["IsolationChoice", "RunKeywords", "RunOptions", "run_options"]

#: ``--isolation`` / ``trial_isolation``: the recipe's choice, ``auto`` the workload's own.
IsolationChoice = Literal["auto", "in_process", "process"]


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How a sweep runs: the recipe's overrides, where the run goes, how progress shows, the
    trials' interpreter, backend and extra workloads.

    Frozen: derive another with :func:`dataclasses.replace` or :func:`run_options`. Nothing is
    checked here; :func:`aorta.sweep` refuses a bad ``progress`` (``UsageError``) or override
    of the recipe (``RecipeError``) before anything runs.

    Parameters
    ----------
    command
        Probe mode: the argv every trial runs (``aorta sweep run -- ARGV``; default the
        recipe's ``command``).
    output
        Root of the run directories, ``<output>/<ticket>/<workload>/<time>`` (default
        ``triage_results``; a resumed run stays where it is).
    ticket, timeout_s, isolation
        Override the recipe's ``ticket``, ``timeout_per_trial`` and ``trial_isolation``
        (``auto``, ``in_process``, ``process``) in ``recipe.resolved.yaml`` (default ``None``).
    mitigations_files
        Sidecar files with more mitigations and environments (default none; a resumed run
        reads its own).
    progress
        ``auto`` (default: rich on a terminal and in Jupyter, lines otherwise), ``lines``,
        ``rich``, ``none`` (nothing), or a :class:`~aorta.report.progress.Reporter`; ``tqdm``,
        an older mode, is the rich bar.
    verbose
        One progress line per trial (default ``False``).
    python
        The interpreter of process-isolated workers (default ``None``: this one).
    backend
        ``gloo``, ``nccl`` or ``auto`` for distributed workloads (default ``None``:
        ``AORTA_BACKEND``, else ``nccl`` with a GPU, ``gloo`` without).
    workloads
        Extra workload classes by name beside the registered ones (a notebook's own; workers
        import it by its module path). Default ``None``.
    check_numerics
        ``True`` arms every Python rank with the numerics locator (the recipe's
        ``check_numerics``; docs/memory.md). Default ``None``: the recipe's.

    See Also
    --------
    run_options : an options value with some fields replaced, as :func:`aorta.sweep`'s
        keywords do.

    Examples
    --------
    >>> from aorta.run.options import RunOptions
    >>> opts = RunOptions(output="/tmp/runs", progress="none")
    >>> opts.output, opts.progress, opts.ticket, opts.verbose
    ('/tmp/runs', 'none', None, False)
    >>> import dataclasses
    >>> dataclasses.replace(opts, ticket="T-1").ticket
    'T-1'
    >>> opts.verbose = True
    Traceback (most recent call last):
    ...
    dataclasses.FrozenInstanceError: cannot assign to field 'verbose'
    """

    command: Sequence[str] | None = None
    output: str | Path = "triage_results"
    ticket: str | None = None
    timeout_s: float | None = None
    isolation: IsolationChoice | None = None
    mitigations_files: Sequence[str | Path] = ()
    progress: ProgressMode | Reporter = "auto"
    verbose: bool = False
    python: str | None = None
    backend: str | None = None
    workloads: Mapping[str, type[Workload]] | None = None
    #: Arm the numerics locator (``True`` sets the recipe's ``check_numerics``; ``None``: the
    #: recipe's).
    check_numerics: bool | None = None


class RunKeywords(TypedDict, total=False):
    """The fields of :class:`RunOptions` as keywords (:func:`aorta.sweep`'s ``**overrides``)."""

    command: Sequence[str] | None
    output: str | Path
    ticket: str | None
    timeout_s: float | None
    isolation: IsolationChoice | None
    mitigations_files: Sequence[str | Path]
    progress: ProgressMode | Reporter
    verbose: bool
    python: str | None
    backend: str | None
    workloads: Mapping[str, type[Workload]] | None
    check_numerics: bool | None


def run_options(
    options: RunOptions | None = None, /, **overrides: Unpack[RunKeywords]
) -> RunOptions:
    """``options`` (default :class:`RunOptions`'s defaults) with each keyword replacing its
    field, ``None`` too (``ticket=None``: the recipe's): how :func:`aorta.sweep`'s keywords
    combine with its ``options=``. A keyword that is no field raises ``TypeError``.

    >>> run_options(RunOptions(ticket="T-1"), progress="none").progress
    'none'
    """
    base = options if options is not None else RunOptions()
    return with_keywords(base, overrides, what="the run options")
