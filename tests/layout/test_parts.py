"""The markers of the real parts (tests/parts.py): found from what a test reaches, registered
in pyproject.toml, and every test that starts a part is ``slow`` too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import chromium, parts, processes, sshd
from tests.sshd import SshdFarm, make_key

ROOT = Path(__file__).resolve().parents[2]


def _starts_sshd(root):
    with SshdFarm(root, make_key(root)) as farm:
        farm.start(2)


def _through_a_helper(tmp_path):
    _starts_sshd(tmp_path)


def _through_the_module(tmp_path):
    return sshd.SshdFarm(tmp_path, tmp_path / "key")


def _in_a_lambda(recipe, out):
    return lambda: processes.torchrun(recipe, out)


class _Page:
    def shot(self, url):
        return chromium.look(url, width=1, height=1, expression="1", profile=Path("p"))


def _through_a_class(url):
    return _Page().shot(url)


def _only_a_key(tmp_path):
    return make_key(tmp_path)  # ssh-keygen: no sshd starts


def _fixture_with_a_sweep(tmp_path):
    return processes.torchrun(tmp_path / "r.yaml", tmp_path / "out")


@pytest.mark.parametrize(
    ("test", "fixtures", "expected"),
    [
        (_starts_sshd, [], {"sshd"}),
        (_through_a_helper, [], {"sshd"}),
        (_through_the_module, [], {"sshd"}),
        (_in_a_lambda, [], {"torchrun"}),
        (_through_a_class, [], {"chromium"}),
        (_only_a_key, [], set()),
        (_only_a_key, [_fixture_with_a_sweep], {"torchrun"}),
    ],
)
def test_a_part_is_found_through_helpers_modules_lambdas_classes_and_fixtures(
    test, fixtures, expected
):
    assert parts.parts_of(test, fixtures) == expected


def test_every_part_is_a_registered_marker_with_the_same_words():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = dict(m.split(": ", 1) for m in config["markers"])
    assert {p: registered.get(p) for p in parts.PARTS} == parts.PARTS
    assert set(parts.starters().values()) == set(parts.PARTS)


#: Collects the suite in a fresh process and prints each test's part markers (and slow).
_MARKERS = """
import sys, pytest
class Print:
    def pytest_collection_finish(self, session):
        for item in session.items:
            names = sorted({m.name for m in item.iter_markers()} & set(sys.argv[1:]))
            print("MARKS", item.nodeid, *names, sep="\t")
pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "tests"],
            plugins=[Print()])
"""


@pytest.mark.slow
def test_the_real_suite_is_marked_at_collection_and_every_part_is_slow():
    """Each part's tests are where its helper is used (Docker: the container tests alone), and
    no test that starts a part is left out of `slow` (the edit loop starts none)."""
    out = subprocess.run(
        [sys.executable, "-c", _MARKERS, "slow", *parts.PARTS],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    ).stdout
    rows = [line.split("\t") for line in out.splitlines() if line.startswith("MARKS\t")]
    marks = {row[1]: set(row[2:]) for row in rows}
    assert len(marks) > 1000, out[-2000:]
    files = {
        part: {test.split("::", 1)[0] for test, names in marks.items() if part in names}
        for part in parts.PARTS
    }
    assert files["docker"] == {"tests/launch/test_container.py"}
    assert files["slurm"] == {"tests/launch/test_slurm.py"}
    assert {"tests/launch/test_ssh.py", "tests/launch/test_container.py"} <= files["sshd"]
    assert "tests/report/test_report_page.py" in files["chromium"]
    assert {"tests/run/test_distributed.py", "tests/run/test_hang_forensics.py"} <= files[
        "torchrun"
    ]
    assert not {t for t, names in marks.items() if names - {"slow"} and "slow" not in names}
