"""Shared fixtures. Everything here is real: files, processes, the CLI in-process."""

from __future__ import annotations

import collections
import fnmatch
import json
import os
import resource
import signal
import time
from pathlib import Path

import pytest
from hypothesis import settings

from tests import parts
from tests.process_state import State

# One OpenMP thread per torch process unless the caller says otherwise, set before anything
# imports torch (the xdist workers and every process the tests start inherit it). The suite
# runs six workers and their sweeps on two cores: torch's default of a thread per core had
# each process's threads spin waiting for cores the others held (in-process torch tests:
# 8% less CPU alone, more under load). tests/run/test_engine.py's import-time test works
# with any ambient count.
os.environ.setdefault("OMP_NUM_THREADS", "1")

DATA = Path(__file__).parent / "data"
UPSTREAM_RECIPES = DATA / "upstream_recipes"

# Same examples everywhere; only the per-example deadline is sized for the suite's real
# conditions (six xdist workers beside torchrun, Docker and mypy on two cores): hypothesis's
# 200 ms default failed a 2 ms example that was descheduled for 350 ms, and a 2 s deadline of
# a fuzz test failed at 2.15 s. The deadline catches runaway work (a blow-up takes minutes),
# not speed, which benchmarks/ measures; so one generous value, set here, for every test.
settings.register_profile("aorta", deadline=10_000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "aorta"))


def pytest_configure(config: pytest.Config) -> None:
    # A script that starts the suite in the background (`make test &`) leaves SIGINT ignored
    # in it and in everything it starts, and the ignore survives exec: the Ctrl-C tests then
    # interrupt nothing. Python's own handler here means the processes tests start get the
    # default again (each worker runs this too).
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# `make test` keeps each file on one xdist worker (`--dist loadfile --no-loadscope-reorder`)
# and hands files out in collection order. The files below are the long ones (real Docker,
# torchrun, sshd, Slurm, Chromium; `make durations MARK=slow` shows them), longest first: they
# start first so that none of them starts last and sets the wall time alone while the other
# workers idle. The order only schedules; it changes no test. tests/layout/test_schedule.py checks
# that every pattern still names a file.
LONG_FILES_FIRST = (
    "tests/launch/test_container.py",
    "tests/run/test_distributed_ranks.py",
    "tests/run/test_distributed.py",
    "tests/run/test_hang_forensics.py",
    "tests/run/test_rank_causes_sweep.py",
    "tests/matrix/test_memory_sweep.py",
    "tests/report/test_report_html.py",
    "tests/run/test_resume.py",
    "tests/run/test_printed_commands.py",
    "tests/launch/test_slurm.py",
    "tests/matrix/test_verdicts.py",
    "notebooks/03_*.ipynb",
    "tests/report/test_report_hardware.py",
    "tests/matrix/test_trace_matrix_sweep.py",
    "tests/run/test_hardening_run.py",
    "tests/matrix/test_explain_sweep.py",
    "tests/run/test_stragglers_sweep.py",
    "tests/run/test_engine.py",
    "tests/launch/test_cli.py",
    "tests/launch/test_ssh.py",
    "tests/launch/test_history_nodes.py",
    "tests/cli/test_history_sweep.py",
    # then the middling ones (20-50 s beside the others): left to collection order they ran
    # last, and tests/trace/test_hardening.py alone set the last 30 s of a CI run
    "tests/run/test_adaptive_sweep.py",
    "tests/cli/test_bisect_sweep.py",
    "tests/report/test_history_page.py",
    "tests/cli/test_compare.py",
    "tests/matrix/test_dataset.py",
    "tests/trace/test_hardening.py",
    "tests/run/test_signatures.py",
    "tests/store/test_run_secrets.py",
    "tests/report/test_findings_sweep.py",
    "tests/report/test_report_page.py",
    "tests/recipe/test_recipe_properties.py",
    "tests/run/test_hang_activity.py",
    "tests/run/test_fr_safety.py",
    "tests/hang/test_live.py",
    "tests/matrix/test_stats_properties.py",
    "tests/matrix/test_trace_matrix.py",
    "tests/run/test_orphans.py",
    "tests/recipe/test_hardening_yaml.py",
    "tests/store/test_rundir_lock.py",
    "tests/store/test_bundle_bounds.py",
    "tests/store/test_bundle_forensics.py",
    "tests/matrix/test_rank_tests.py",
    "tests/trace/test_diff.py",
    "tests/launch/test_cvs_launch.py",
    "notebooks/01_*.ipynb",
)


def schedule_rank(nodeid: str) -> int:
    """Position of a test's file in :data:`LONG_FILES_FIRST` (the rest after, as collected)."""
    path = nodeid.split("::", 1)[0]
    for rank, pattern in enumerate(LONG_FILES_FIRST):
        if fnmatch.fnmatch(path, pattern):
            return rank
    return len(LONG_FILES_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: schedule_rank(item.nodeid))  # stable: same order within a file


def pytest_itemcollected(item: pytest.Item) -> None:
    """A marker per real part the test starts (sshd, slurm, docker, chromium, torchrun), found
    from the helpers it reaches (tests/parts.py): each item as it is collected, so `-m "not
    docker"` (which deselects once all are) sees them."""
    parts.mark([item])


# Each file leaves its worker as it found it (tests/process_state.py): read before its first
# test, compared after its last one's teardown (module fixtures gone), put back on a difference.
_file_start: dict[Path, State] = {}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item):
    if item.path not in _file_start:
        _file_start.clear()  # one file at a time per process
        _file_start[item.path] = State.now()
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    result = yield
    if nextitem is not None and nextitem.path == item.path:
        return result
    before = _file_start.pop(item.path, None)
    if before is not None and (changes := before.changes(State.now())):
        before.restore()
        raise AssertionError(
            f"{item.path.name} left its worker process changed (put back now):\n  "
            + "\n  ".join(changes)
        )
    return result


# On two cores `make test` is bound by CPU, which --durations (wall, stretched by whatever ran
# beside) hides: `make test PYTEST_ARGS=--cpu-log=cpu.jsonl` appends each test's CPU seconds
# (its worker and the children it reaped; a daemon's lands on the test that stops it) and
# prints the files that spent most.
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-log", metavar="FILE", help="append each test's CPU seconds to FILE")


#: Files that only compute in the worker (no process, sweep or wait): the CPU their tests take
#: in a run (the worker's own, ``self_s``) is the machine's speed then. This machine's varies
#: by ±30% from hour to hour, more than most changes to the suite, so two runs' times compare
#: only scaled by it. They exercise code that changes little (recipe parsing): a file of the
#: statistics left the set when matrix/rank_tests.py halved its CPU.
SPEED_REFERENCE = (
    "tests/recipe/test_recipe_properties.py",
    "tests/recipe/test_hardening_yaml.py",
)


def pytest_sessionstart(session: pytest.Session) -> None:
    log = session.config.getoption("cpu_log")
    if log and not os.environ.get("PYTEST_XDIST_WORKER"):
        Path(log).unlink(missing_ok=True)  # this run's tests only


def _cpu_seconds() -> tuple[float, float]:
    """This process's CPU seconds, and with its reaped children's."""
    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    mine = own.ru_utime + own.ru_stime
    return mine, mine + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    log = item.config.getoption("cpu_log")
    start, began = (_cpu_seconds(), time.time()) if log else ((0.0, 0.0), 0.0)
    yield
    if log:
        end = _cpu_seconds()
        row = {
            "test": item.nodeid,
            "cpu_s": end[1] - start[1],
            "self_s": end[0] - start[0],  # the worker's own: no reaped daemon lands here
            # when and where, to see the schedule: which worker idled, what ran last
            "start": began,
            "wall_s": time.time() - began,
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        }
        with open(log, "a") as f:  # one short line per write: workers append side by side
            f.write(json.dumps(row) + "\n")


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    log = config.getoption("cpu_log")
    if not log or os.environ.get("PYTEST_XDIST_WORKER") or not Path(log).is_file():
        return
    per_file: collections.Counter[str] = collections.Counter()
    speed = 0.0
    for line in Path(log).read_text().splitlines():
        row = json.loads(line)
        path = row["test"].split("::", 1)[0]
        per_file[path] += row["cpu_s"]
        speed += row["self_s"] if path in SPEED_REFERENCE else 0.0
    terminalreporter.section(f"CPU seconds per file (from {log}), most first")
    for path, seconds in per_file.most_common(15):
        terminalreporter.write_line(f"{seconds:8.1f}  {path}")
    terminalreporter.write_line(f"{sum(per_file.values()):8.1f}  in all")
    terminalreporter.write_line(
        f"{speed:8.1f}  in the speed reference ({len(SPEED_REFERENCE)} compute-only files, "
        "tests/conftest.py: another run's times compare scaled by the ratio of the two)"
    )


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def write(tmp_path):
    """Write text into tmp_path/name and return the path."""

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    return _write


@pytest.fixture
def run_cli(capsys):
    """Call ``aorta.cli.main`` in-process; return (code, stdout, stderr)."""
    from aorta.cli import main

    def _run(*args: str) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return _run


@pytest.fixture(autouse=True)
def _quiet_ci(monkeypatch):
    # Progress bars draw plain lines under CI; make that the default for every test.
    monkeypatch.setenv("CI", os.environ.get("CI", "1"))
