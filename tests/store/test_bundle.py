"""``aorta bundle``: a real sweep packed into a tar.gz, with secrets planted everywhere a run
can carry them — none of them may leave in the archive."""

from __future__ import annotations

import gzip
import json
import tarfile

import pytest

from aorta.recipe import load_recipe_text
from aorta.run.sweep import sweep
from aorta.store.bundle import parse_size, plan_bundle, write_bundle
from aorta.store.record import TrialRecord
from aorta.store.rundir import RunDir, trace_file_name

HF = "hf_PlantedTokenValue0123456789"
DB_PW = "Sup3rSecretDbPw"
BEARER = "eyPlantedBearer987654321xyz"
TRACE_TOKEN = "trace_meta_token_ABCDEF123456"
CUSTOM = "custom-value-scrubbed-by-glob"
IP = "10.44.55.66"
PLANTED = (HF, DB_PW, BEARER, TRACE_TOKEN, CUSTOM, IP)

SCRIPT = (
    f'echo "connecting to postgres://u:{DB_PW}@h/db"; '
    'echo "token in env: $HF_TOKEN"; '
    f'echo "Authorization: Bearer {BEARER}" >&2; '
    f'echo "peer {IP} said hello"; '
    'echo "my value $MY_CUSTOM"; exit 1'
)

RECIPE = f"""
ticket: TICKET-42
trials: 1
redaction:
  scrub_env_keys: ["MY_*"]
  scrub_ip_addresses: true
cells:
  - {{name: baseline, mitigations: [none]}}
  - name: leaky
    mitigations: [none]
    extra_env: {{HF_TOKEN: "{HF}", MY_CUSTOM: "{CUSTOM}"}}
"""


@pytest.fixture
def leaky_run(tmp_path):
    """A real run whose logs hold planted secrets, plus a record and a trace planted by hand."""
    recipe = load_recipe_text(RECIPE, command=["sh", "-c", SCRIPT])
    run = sweep(recipe, output=tmp_path / "runs", progress="none").run_dir
    rd = RunDir(run)
    # A record written by something less careful than the engine: a bearer token in its error.
    path = rd.trial_path("leaky", 0)
    rec = TrialRecord.model_validate_json(path.read_bytes())
    rec = rec.model_copy(update={"error": f"HTTP 401 with header Bearer {BEARER}"})
    path.write_bytes(rec.to_json())
    # A profiler trace whose metadata carries a token (and the HF token's value).
    trace = rd.trace_dir("leaky", 0)
    trace.mkdir(parents=True, exist_ok=True)
    doc = {
        "traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 2, "pid": 0, "tid": 0}],
        "distributedInfo": {"backend": "gloo", "rank": 0},
        "metadata": {"launcher_token": TRACE_TOKEN, "argv": f"train.py --hf {HF}"},
    }
    (trace / trace_file_name(0)).write_bytes(gzip.compress(json.dumps(doc).encode()))
    # The HTML report, when present, goes in too (and is scanned).
    report = rd.report_dir
    report.mkdir(exist_ok=True)
    (report / "report.html").write_text(f"<html><body>peer {IP}, token {HF}</body></html>")
    return run


def _files(root):
    return sorted(p for p in root.rglob("*") if p.is_file())


def _extract(archive, dest):
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(dest, filter="data")
    return dest


def _grep(root, needles):
    hits = []
    for path in _files(root):
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        hits += [f"{path.relative_to(root)}: {n}" for n in needles if n.encode() in data]
    return hits


@pytest.mark.slow
def test_the_planted_secrets_are_in_the_run(leaky_run):
    # The test means something only if the run itself holds them (logs, recipe, trace, report).
    assert set(_grep(leaky_run, PLANTED)) >= {
        f"cells/leaky/trial_0000/stdout.log: {DB_PW}",
        f"cells/leaky/trial_0000/stderr.log: {BEARER}",
        f"cells/leaky/trial_0000/trace/rank0.pt.trace.json.gz: {TRACE_TOKEN}",
        f"report/report.html: {HF}",
        f"recipe.resolved.yaml: {HF}",
        f"cells/leaky/trial_0000.json: {BEARER}",
    }


@pytest.mark.slow
def test_bundle_holds_the_run_and_no_secret(leaky_run, tmp_path):
    plan = plan_bundle(leaky_run, ticket="TICKET-42", env={})
    archive = write_bundle(plan, tmp_path / "out")
    assert archive.name.startswith("TICKET-42-") and archive.name.endswith("Z.tar.gz")
    root = _extract(archive, tmp_path / "x") / plan.name
    names = {p.relative_to(root).as_posix() for p in _files(root)}
    assert {
        "manifest.json",
        "recipe.resolved.yaml",
        "host_env.json",
        "matrix.md",
        "matrix.json",
        "report/report.html",
        "cells/leaky/cell.json",
        "cells/leaky/trial_0000.json",
        "cells/leaky/trial_0000/stdout.log",
        "cells/leaky/trial_0000/stderr.log",
        "cells/leaky/trial_0000/trace/rank0.pt.trace.json.gz",
        "bundle_manifest.json",
    } <= names
    assert _grep(root, PLANTED) == []
    # What was redacted is still readable: the log line, the record, the trace.
    log = (root / "cells/leaky/trial_0000/stdout.log").read_text()
    assert "postgres://u:<redacted>@h/db" in log and "peer <ip> said hello" in log
    rec = TrialRecord.model_validate_json((root / "cells/leaky/trial_0000.json").read_bytes())
    assert (
        rec.error == "HTTP 401 with header Bearer <redacted>"
        and rec.status.value == "workload_failed"
    )
    trace = json.loads(
        gzip.decompress((root / "cells/leaky/trial_0000/trace/rank0.pt.trace.json.gz").read_bytes())
    )
    assert trace["metadata"]["launcher_token"] == "<redacted>"
    assert trace["traceEvents"][0]["name"] == "k"
    # The manifest counts per file and says what was left out and why.
    manifest = json.loads((root / "bundle_manifest.json").read_text())
    counts = {f["path"]: f["redactions"] for f in manifest["files"]}
    assert counts["cells/leaky/trial_0000/stdout.log"] >= 4  # db password, HF, ip, custom
    assert counts["cells/leaky/trial_0000/trace/rank0.pt.trace.json.gz"] >= 2
    assert counts["matrix.md"] == 0
    left = {e["path"]: e["reason"] for e in manifest["left_out"]}
    assert "results.nc" in left and "load_run" in left["results.nc"]
    assert manifest["redaction"]["scrub_env_keys"] == ["MY_*"]
    assert HF not in json.dumps(manifest)


@pytest.mark.slow
def test_review_lists_and_writes_nothing(leaky_run, tmp_path, run_cli):
    before = {p: p.stat().st_mtime_ns for p in _files(leaky_run)}
    out = tmp_path / "out"
    code, text, _ = run_cli("bundle", leaky_run, "--ticket", "T-1", "--review", "--output", out)
    assert code == 0
    assert "review: nothing is written" in text and "cells/leaky/trial_0000/stdout.log" in text
    assert "results.nc" in text.split("Left out:")[1]
    assert not out.exists()
    assert {p: p.stat().st_mtime_ns for p in _files(leaky_run)} == before
    assert all(s not in text for s in PLANTED)


@pytest.mark.slow
def test_cli_writes_the_archive_and_honours_the_cap_and_no_traces(leaky_run, tmp_path, run_cli):
    out = tmp_path / "out"
    code, text, _ = run_cli(
        "bundle", leaky_run, "--ticket", "T-2", "-o", out, "--no-traces", "--max-size", "0"
    )
    assert code == 0, text
    (archive,) = out.glob("T-2-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.loads(
            tar.extractfile(next(n for n in names if n.endswith("bundle_manifest.json"))).read()
        )
    assert not any(n.endswith(".log") or ".pt.trace." in n for n in names)
    assert any(n.endswith("trial_0000.json") for n in names)  # records always go in
    reasons = {e["path"]: e["reason"] for e in manifest["left_out"]}
    assert reasons["cells/leaky/trial_0000/trace/rank0.pt.trace.json.gz"] == "traces not asked for"
    assert "size cap" in reasons["cells/leaky/trial_0000/stdout.log"]


@pytest.mark.slow
def test_flags_add_to_the_recipes_redaction(leaky_run, tmp_path):
    plan = plan_bundle(leaky_run, scrub_env_keys=["NCCL_*"], scrub_paths=True, env={})
    assert plan.redactor.scrub_keys == ("MY_*", "NCCL_*") and plan.redactor.scrub_paths
    assert plan.ticket == "TICKET-42"  # the run's own ticket by default


def test_parse_size_refuses_nonsense():
    assert parse_size("1.5K") == 1536
    with pytest.raises(Exception, match="--max-size"):
        parse_size("lots")
