"""The long-files-first schedule of ``make test`` and the CPU log's speed reference name files
that exist, each once."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from tests.conftest import LONG_FILES_FIRST, SPEED_REFERENCE, schedule_rank

ROOT = Path(__file__).resolve().parents[2]
FILES = [
    p.relative_to(ROOT).as_posix()
    for d in ("tests", "notebooks")
    for p in (ROOT / d).rglob("*")
    if p.suffix in {".py", ".ipynb"}
]


def test_every_pattern_names_exactly_one_file():
    for pattern in LONG_FILES_FIRST:
        assert len(fnmatch.filter(FILES, pattern)) == 1, pattern


def test_the_speed_reference_names_files_that_start_nothing():
    for path in SPEED_REFERENCE:
        assert path in FILES, path
        text = (ROOT / path).read_text()
        assert not any(s in text for s in ("mark.slow", "subprocess", "sweep(")), path


def test_long_files_come_first_in_their_listed_order_and_the_rest_keep_theirs():
    ids = [
        "tests/recipe/test_recipe.py::test_a",
        "notebooks/03_traces_in_the_matrix.ipynb::",
        "tests/run/test_distributed.py::test_b[x]",
        "tests/launch/test_container.py::test_c",
        "aorta/recipe/load.py::aorta.recipe.load",
    ]
    assert sorted(ids, key=schedule_rank) == [ids[3], ids[2], ids[1], ids[0], ids[4]]


def test_every_file_that_starts_a_cluster_part_is_scheduled(request):
    """A file that starts torchrun, sshd, Slurm or Docker (its tests' markers) is in the
    schedule: test_hang_forensics.py was not, started last, and alone its sweep held the last
    minute of a CI run past 12 minutes. Every worker collects the whole suite; a run of some
    paths only (``PYTEST_ARGS=tests/layout``) cannot tell."""
    items = request.session.items
    if not any(i.nodeid.startswith("tests/launch/test_container.py") for i in items):
        pytest.skip("the session did not collect the whole suite")
    parts = ("torchrun", "sshd", "slurm", "docker")
    files = {i.nodeid.split("::")[0] for i in items if any(i.get_closest_marker(p) for p in parts)}
    unlisted = sorted(f for f in files if schedule_rank(f) == len(LONG_FILES_FIRST))
    assert unlisted == [], "add them to tests/conftest.py LONG_FILES_FIRST, longest first"
