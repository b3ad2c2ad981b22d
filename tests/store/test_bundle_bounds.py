"""``aorta bundle`` on hostile inputs (issue 24): a deeply nested JSON artifact is left out and
listed, not a ``RecursionError``; an over-long ticket is one ``Error:`` line (real sweeps,
real archives)."""

from __future__ import annotations

import json
import tarfile

import pytest

from aorta.errors import ExitCode, UsageError
from aorta.recipe.limits import MAX_NAME_BYTES
from aorta.recipe.schema import load_recipe_text
from aorta.run.sweep import sweep
from aorta.store.bundle import MAX_JSON_DEPTH, plan_bundle

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
