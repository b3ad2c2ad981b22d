"""Progress of a sweep: one bar, rich's, on a terminal and in Jupyter; plain lines otherwise.

The engine calls a :class:`Reporter`; it never prints itself. :func:`choose_reporter`
picks one: plain lines when the stream is not a terminal or ``CI`` is set, rich on a
terminal (``NO_COLOR`` honoured) and inside a Jupyter kernel (a live widget through
ipywidgets; a kernel without ipywidgets gets the plain lines, which it shows as they come).
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any, Literal, get_args

from aorta.errors import UsageError
from aorta.store.record import TrialRecord
from aorta.text import printable

__all__ = ["LineReporter", "NullReporter", "Reporter", "check_progress", "choose_reporter"]

ProgressMode = Literal["auto", "rich", "lines", "none", "tqdm"]
PROGRESS_MODES: tuple[str, ...] = get_args(ProgressMode)
#: Modes kept so that scripts written for them still run: ``tqdm`` is the rich bar now.
_OLD_MODES: dict[str, ProgressMode] = {"tqdm": "rich"}


def _trial_line(cell: str, trial: int, record: TrialRecord) -> str:
    wall = f"{record.wall_clock_s:.2f} s" if record.wall_clock_s is not None else "-"
    text = f"{cell} trial {trial}: {record.status.value} ({wall})"
    if record.error:
        text += f" — {record.error[:160]}"
    return printable(text)  # an error may quote a trial's log


class Reporter:
    """Base reporter: does nothing. Subclasses override what they show."""

    def start(self, *, run_dir: str, total: int, done: int, cells: int) -> None:
        """The sweep starts: ``total`` trials, ``done`` of them already recorded (resume)."""

    def bound(self, total: int) -> None:
        """The run holds at most ``total`` trials: a ``schedule: adaptive`` run, whose cells stop
        once settled. Said before :meth:`start` (then its ``total`` is this bound) and again
        each time cells stop (the bound falls, so a bar ends full)."""

    def trial_started(self, cell: str, trial: int) -> None:
        """A trial begins."""

    def trial_done(self, cell: str, trial: int, record: TrialRecord) -> None:
        """A trial ended (or was skipped as did_not_run)."""

    def cell_done(self, cell: str) -> None:
        """Every trial of ``cell`` has a record."""

    def message(self, text: str) -> None:
        """A line worth showing (a warning, a resumed run)."""

    def close(self) -> None:
        """The sweep ended."""


NullReporter = Reporter


class LineReporter(Reporter):
    """Plain lines: a line per trial with ``verbose``, else one per finished cell.

    A cell's line counts that cell's trials run by this sweep, by status (an interleaved
    schedule runs every cell's trials in rounds, so the counts are kept per cell); the
    ``[n/total]`` in front counts every trial of the run.

    >>> import io
    >>> out = io.StringIO()
    >>> r = LineReporter(out)
    >>> r.start(run_dir="RUN", total=4, done=0, cells=2)
    >>> for trial in (0, 1):
    ...     for cell in ("a", "b"):
    ...         rec = TrialRecord(cell=cell, cell_id="x", trial=trial, status="ok", passed=True)
    ...         r.trial_done(cell, trial, rec)
    >>> r.cell_done("a"); r.cell_done("b")
    >>> print(out.getvalue(), end="")
    aorta: 2 cells, 4 trials → RUN
    [4/4] a: 2 ok
    [4/4] b: 2 ok

    An adaptive run's total is a bound (``≤``), lowered as cells stop:

    >>> out = io.StringIO()
    >>> r = LineReporter(out)
    >>> r.bound(20); r.start(run_dir="RUN", total=20, done=0, cells=2)
    >>> r.trial_done("a", 0, rec); r.bound(11); r.cell_done("a")
    >>> print(out.getvalue(), end="")
    aorta: 2 cells, ≤ 20 trials (adaptive: cells stop once settled) → RUN
    [1/≤11] a: 1 ok
    """

    def __init__(self, stream: IO[str] | None = None, *, verbose: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.verbose = verbose
        self._total = self._n = 0
        self._at_most = ""
        self._cell_counts: dict[str, dict[str, int]] = {}

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def bound(self, total: int) -> None:
        self._total, self._at_most = total, "≤"

    def start(self, *, run_dir: str, total: int, done: int, cells: int) -> None:
        self._total, self._n = total, done
        resumed = f", {done} already done" if done else ""
        how = " (adaptive: cells stop once settled)" if self._at_most else ""
        self._print(
            f"aorta: {cells} cells, {self._at_most and '≤ '}{total} trials{how}{resumed} → {run_dir}"
        )

    def _count(self) -> str:
        return f"[{self._n}/{self._at_most}{self._total}]"

    def trial_done(self, cell: str, trial: int, record: TrialRecord) -> None:
        self._n += 1
        if self.verbose:
            self._print(f"{self._count()} {_trial_line(cell, trial, record)}")
        counts = self._cell_counts.setdefault(cell, {})
        counts[record.status.value] = counts.get(record.status.value, 0) + 1

    def cell_done(self, cell: str) -> None:
        counts = self._cell_counts.pop(cell, {})
        if counts and not self.verbose:
            text = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            self._print(f"{self._count()} {cell}: {text}")

    def message(self, text: str) -> None:
        self._print(printable(text))


class RichReporter(Reporter):
    """A rich progress bar (cells × trials, ETA) with per-trial lines above it when verbose."""

    def __init__(self, stream: IO[str] | None = None, *, verbose: bool = False) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.console = Console(file=stream or sys.stderr, no_color=bool(os.environ.get("NO_COLOR")))
        self.verbose = verbose
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self._task: Any = None
        self._at_most = False

    def bound(self, total: int) -> None:
        self._at_most = True
        if self._task is not None:
            self.progress.update(self._task, total=total)

    def start(self, *, run_dir: str, total: int, done: int, cells: int) -> None:
        at_most = "≤ " if self._at_most else ""
        how = " (adaptive: cells stop once settled)" if self._at_most else ""
        self.console.print(f"aorta: {cells} cells, {at_most}{total} trials{how} → {run_dir}")
        self.progress.start()
        self._task = self.progress.add_task("starting", total=total, completed=done)

    def trial_started(self, cell: str, trial: int) -> None:
        self.progress.update(self._task, description=f"{cell} #{trial}")

    def trial_done(self, cell: str, trial: int, record: TrialRecord) -> None:
        self.progress.advance(self._task)
        if self.verbose or record.status.value not in ("ok", "did_not_run"):
            self.progress.console.print(
                _trial_line(cell, trial, record), markup=False, highlight=False
            )

    def message(self, text: str) -> None:
        self.progress.console.print(printable(text), markup=False, highlight=False)

    def close(self) -> None:
        self.progress.stop()


def _in_jupyter() -> bool:
    # A running kernel, not merely an imported ipykernel module (a test runner or a library
    # may import it in a plain process, which then drew tqdm bars into a log).
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and hasattr(shell, "kernel") and not sys.stderr.isatty()


def _has_widgets() -> bool:
    """Whether rich can draw a live bar in this kernel (it does so through ipywidgets)."""
    import importlib.util

    return importlib.util.find_spec("ipywidgets") is not None


def check_progress(mode: object) -> None:
    """Refuse what is neither a progress mode nor a :class:`Reporter`, naming the choices.

    >>> check_progress("none"); check_progress("off")
    Traceback (most recent call last):
    aorta.errors.UsageError: progress='off': not a progress mode; choose one of auto, rich, lines, none, tqdm (none shows nothing), or pass a Reporter
    """
    if isinstance(mode, Reporter) or (isinstance(mode, str) and mode in PROGRESS_MODES):
        return
    raise UsageError(
        f"progress={mode!r}: not a progress mode; choose one of {', '.join(PROGRESS_MODES)} "
        "(none shows nothing), or pass a Reporter"
    )


def choose_reporter(
    mode: ProgressMode | Reporter = "auto", *, verbose: bool = False, stream: IO[str] | None = None
) -> Reporter:
    """The reporter for ``mode`` (``auto`` decides from the terminal, ``CI`` and Jupyter);
    anything else is refused (:func:`check_progress`)."""
    check_progress(mode)
    if isinstance(mode, Reporter):
        return mode
    stream = stream or sys.stderr
    mode = _OLD_MODES.get(mode, mode)
    if mode == "auto":
        if _in_jupyter():
            mode = "rich" if _has_widgets() else "lines"
        elif os.environ.get("CI") or not getattr(stream, "isatty", lambda: False)():
            mode = "lines"
        else:
            mode = "rich"
    if mode == "none":
        return NullReporter()
    if mode == "rich":
        return RichReporter(stream, verbose=verbose)
    return LineReporter(stream, verbose=verbose)
