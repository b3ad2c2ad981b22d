"""``aorta bundle`` on hostile inputs (issue 24): a deeply nested JSON artifact is left out and
listed, not a ``RecursionError``; an over-long ticket is one ``Error:`` line (real sweeps,
real archives)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tarfile

import pytest

from aorta.errors import ExitCode, UsageError
from aorta.recipe import load_recipe_text
from aorta.recipe.limits import MAX_NAME_BYTES
from aorta.run.sweep import sweep
from aorta.store.bundle import MAX_JSON_DEPTH, plan_bundle
from aorta.store.redact import record_secrets
from aorta.store.rundir import RunDir

# Three JSON files in the trial folder: far past Python's recursion limit, past the bundle's
# bound but parseable, and an ordinary one beside them.
WRITE = (
    'import json, os; d = os.environ["AORTA_ARTIFACT_DIR"]; '
    'open(f"{d}/deep.json", "w").write("[" * 100000 + "]" * 100000); '
    'open(f"{d}/nested.json", "w").write("{\\"a\\":" * 500 + "1" + "}" * 500); '
    'json.dump({"ok": [1, 2, {"x": "y"}]}, open(f"{d}/fine.json", "w"))'
)


@pytest.fixture
def nested_run(tmp_path):
    recipe = load_recipe_text(
        "mode: probe\ntrials: 1\nmitigation_axis: [none]\n", command=["python3", "-c", WRITE]
    )
    result = sweep(recipe, output=tmp_path / "runs", progress="none")
    assert result.exit_code == ExitCode.OK
    return result.run_dir


def test_deeply_nested_json_is_left_out_and_listed(nested_run, tmp_path, run_cli):
    code, out, err = run_cli("bundle", nested_run, "-o", tmp_path / "b", "--ticket", "T-1")
    assert code == ExitCode.OK, err
    assert "Traceback" not in err and "left out" in out
    (archive,) = (tmp_path / "b").glob("T-1-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        manifest = json.loads(tar.extractfile(f"{archive.name[:-7]}/bundle_manifest.json").read())
    assert any(n.endswith("/fine.json") for n in names)
    assert not any(n.endswith(("/deep.json", "/nested.json")) for n in names)
    left = {e["path"].rsplit("/", 1)[-1]: e["reason"] for e in manifest["left_out"]}
    for name in ("deep.json", "nested.json"):
        assert f"deeper than {MAX_JSON_DEPTH} levels" in left[name], left


@pytest.mark.parametrize("ticket", ["T" * 250, "é" * 101])
def test_an_over_long_ticket_is_one_error_line(nested_run, tmp_path, run_cli, ticket):
    with pytest.raises(UsageError, match=f"at most {MAX_NAME_BYTES} bytes"):
        plan_bundle(nested_run, ticket=ticket)
    code, _, err = run_cli("bundle", nested_run, "-o", tmp_path / "b", "--ticket", ticket)
    assert code == ExitCode.USAGE
    assert err.startswith("Error: --ticket") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())
    # At the bound it works.
    code, _, err = run_cli(
        "bundle", nested_run, "-o", tmp_path / "ok", "--ticket", "T" * MAX_NAME_BYTES
    )
    assert code == ExitCode.OK, err


# -- issue 39, item 5: compressed members stream through in bounded memory -----------------------
BOMB = """
import gzip, json, resource, sys
from aorta.store.bundle import plan_bundle, write_bundle
plan = plan_bundle(sys.argv[1], env={}, max_size="160M")
archive = write_bundle(plan, sys.argv[2])
notes = {e.path.rsplit("/", 1)[-1]: [e.included, e.note] for e in plan.entries}
print(json.dumps([notes, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024]))
"""


def _whitespace_gzip(path, gib: float, *, head: bytes, tail: bytes) -> None:
    """``head``, ``gib`` GiB of blanks, ``tail``: gzip members (64 MiB of blanks compress to
    64 KiB, so a 4 GiB bomb is 4 MiB on disk and made at once)."""
    blank = gzip.compress(b" " * (64 << 20), compresslevel=9)
    with open(path, "wb") as fh:
        fh.write(gzip.compress(head))
        for _ in range(int(gib * 16)):
            fh.write(blank)
        fh.write(gzip.compress(tail))


def _bundle_in_a_process(run, out) -> tuple[dict, int]:
    done = subprocess.run(
        [sys.executable, "-c", BOMB, str(run), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    notes, peak_mib = json.loads(done.stdout.strip().splitlines()[-1])
    return notes, peak_mib


@pytest.mark.slow
def test_a_gzip_bomb_streams_through_the_bundle_in_bounded_memory(tmp_path):
    """A 4 GiB whitespace bomb is left out once it decompresses past the cap, and a 128 MiB one
    whose last key is a secret goes in redacted — without either ever being held in memory
    (before: decompressed into memory up to the cap, +160 MiB here; +512 MiB at the default)."""
    secret = "BombKey-7e6d5c4b3a"
    rd = RunDir.create(tmp_path / "runs", ticket="B", workload="x")
    rd.manifest_path.write_text('{"ticket": "B"}')
    record_secrets(rd, [secret])
    small = RunDir.create(tmp_path / "small", ticket="S", workload="x")
    small.manifest_path.write_text('{"ticket": "S"}')
    trace = rd.trace_dir("c", 0)
    trace.mkdir(parents=True)
    _whitespace_gzip(trace / "rank0.pt.trace.json.gz", 4, head=b'{"traceEvents": [', tail=b"]}")
    _whitespace_gzip(
        trace / "rank1.pt.trace.json.gz",
        0.125,
        head=b'{"traceEvents": [',
        tail=b'], "args": {"' + secret.encode() + b'": 1}}',
    )
    _, base = _bundle_in_a_process(small.path, tmp_path / "out-small")
    notes, peak = _bundle_in_a_process(rd.path, tmp_path / "out")
    assert notes["rank0.pt.trace.json.gz"][0] is False
    assert "decompresses past the size cap" in notes["rank0.pt.trace.json.gz"][1]
    assert notes["rank1.pt.trace.json.gz"] == [True, "decompressed, scanned, recompressed"]
    assert peak - base < 60, (peak, base)  # MiB: blocks of a MiB, not the blanks
    (archive,) = (tmp_path / "out").glob("B-*.tar.gz")
    with tarfile.open(archive) as tar:
        (member,) = [m for m in tar.getmembers() if m.name.endswith("rank1.pt.trace.json.gz")]
        with gzip.open(tar.extractfile(member)) as fh:
            fh.seek(-64, 2)
            assert fh.read().endswith(b'"args": {"<redacted>": 1}}')
