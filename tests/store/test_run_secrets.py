"""Redaction is a property of the run: a real sweep whose job echoes every secret shape, from
argv, ``extra_env``, the sweep's own environment (what a cluster file's ``env_vars`` become),
into its logs, a collected file, a profiler trace and its records. The bundle is made from a
clean shell (a subprocess whose environment lacks the secrets), the report page in the run
directory too — neither may hold one, and every YAML/JSON/HTML file must still parse.

Then one test per defect of issue #24's "Secrets" list that a run shows (the rules' own tests
are in test_redact_rules.py), and the property test over real sweeps."""

from __future__ import annotations

import gzip
import html.parser
import json
import os
import shlex
import stat
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aorta.recipe import load_recipe, load_recipe_text
from aorta.report import html as html_page
from aorta.report.console import format_summary, summary_to_dict
from aorta.report.report_dir import write_report
from aorta.run.sweep import sweep
from aorta.store.bundle import plan_bundle, write_bundle
from aorta.store.record import TrialRecord
from aorta.store.rundir import RunDir

pytestmark = pytest.mark.slow

PEM_LINES = [
    "MIIEowIBAAKCAQEAvQ2bTq1nXr0Yc3ZkPp0a9Lq7wXy1Zs2Jm3Fk4Hn5Gt6RbQa",
    "Vx8Wc9Ud0Ie1Of2Pg3Qh4Ri5Sj6Tk7Ul8Vm9Wn0Xo1Yp2Zq3Ar4Bs5Ct6Du7EvZ",
]
S = {
    "argv_password": "ArgvPassw0rd-4411",
    "argv_api_key": "ApiKeyValue-88231x",
    "argv_hf_token": "hfArgvTokenValue5521",
    "argv_token_eq": "TokEqValue-99812a",
    "list_password": "ListPassword-3321z",
    "url_password": "Url/Pass@word-7781",
    "redis": "RedisPw-551234q",
    "mysql": "MysqlRootPw-88123",
    "github_pat": "github_pat_11AAAAAAA0abcdefghijKLMNOPQRSTuvwxyz0123456789",
    "aws_asia": "ASIAQWERTYUIOPASDFGH",
    "aws_akia": "AKIAQWERTYUIOPASDFGZ",
    "curl": "CurlUserPw-44512",
    "bearer": "BearerTok-0987654321",
    "extra_env": "hf_EnvTokenValue0123456789abcd",
    "sweep_env": "ClusterEnvSecret-77112",
    "pem": PEM_LINES[0][20:50],
}
#: The sweep's environment (as a cluster file's env_vars reach the trials): never in the recipe.
SWEEP_ENV = {"CLUSTER_DB_PASSWORD": S["sweep_env"]}
PEM = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(PEM_LINES) + "\n-----END RSA PRIVATE KEY-----"

SCRIPT = f"""
echo "argv: $*"
echo "again, alone: $2 and $4 and ({S["argv_hf_token"]})."
echo "argv as a list: ['--password', '{S["list_password"]}']"
echo "db https://alice:{S["url_password"]}@db.example/x"
echo "cache redis://:{S["redis"]}@cache:6379/0 and mysql://root:{S["mysql"]}@db:3306/app"
echo "pat {S["github_pat"]} aws {S["aws_asia"]} {S["aws_akia"]}"
echo "curl -u alice:{S["curl"]} https://x"
echo "Authorization: Bearer {S["bearer"]}" >&2
printf '%s\\n' {shlex.quote(PEM)}
echo "hf token is $HF_TOKEN"
echo "$CLUSTER_DB_PASSWORD"
echo "num_tokens: 4096, processed 1024 tokens"
printf 'collected %s %s\\n' "$CLUSTER_DB_PASSWORD" "$HF_TOKEN" > "$AORTA_ARTIFACT_DIR/notes.png"
mkdir -p "$AORTA_ARTIFACT_DIR/trace"
printf '{{"traceEvents": [], "metadata": {{"note": "%s", "argv": "--hf-token %s"}}}}' \\
  "$CLUSTER_DB_PASSWORD" "$2" | gzip > "$AORTA_ARTIFACT_DIR/trace/rank0.pt.trace.json.gz"
echo "RuntimeError: CUDA out of memory while holding $CLUSTER_DB_PASSWORD" >&2
exit 1
"""
ARGV = [
    "--password",
    S["argv_password"],
    "--api-key",
    S["argv_api_key"],
    "--hf-token",
    S["argv_hf_token"],
    f"--token={S['argv_token_eq']}",
]
RECIPE = f"""
ticket: SEC-1
trials: 1
redaction: {{scrub_paths: true}}
cells:
  - {{name: baseline, mitigations: [none]}}
  - name: leaky
    mitigations: [none]
    extra_env: {{HF_TOKEN: "{S["extra_env"]}"}}
"""


def _clean_env() -> dict[str, str]:
    """A shell that never had the secrets."""
    planted = set(S.values())
    return {
        k: v
        for k, v in os.environ.items()
        if k not in SWEEP_ENV and k != "HF_TOKEN" and v not in planted
    }


def _aorta(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aorta", *map(str, args)],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _sweep(tmp: Path, script: str, argv: list[str], recipe: str, env: dict[str, str]) -> Any:
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        r = load_recipe_text(recipe, command=["sh", "-c", script, "job", *argv])
        return sweep(r, output=tmp / "runs", progress="none")


def _run(tmp: Path, script: str, argv: list[str], recipe: str, env: dict[str, str]) -> Path:
    return _sweep(tmp, script, argv, recipe, env).run_dir


@pytest.fixture(scope="module")
def leaky(tmp_path_factory):
    """The run, its report (report.md and report.html, made from a clean shell), and its
    bundle (from a clean shell), extracted."""
    tmp = tmp_path_factory.mktemp("secrets")
    result = _sweep(tmp, SCRIPT, ARGV, RECIPE, SWEEP_ENV)
    run = result.run_dir
    # What `aorta sweep run` prints at the end (text and --json).
    summary = format_summary(result) + json.dumps(summary_to_dict(result))
    (tmp / "console.txt").write_text(summary)
    done = _aorta("report", run, "--html")
    assert done.returncode == 0, done.stderr
    done = _aorta("bundle", run, "--ticket", "SEC-1", "-o", tmp / "out")
    assert done.returncode == 0, done.stderr
    (archive,) = (tmp / "out").glob("SEC-1-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp / "x", filter="data")
    (root,) = (tmp / "x").iterdir()
    return run, root


def _texts(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        out[path.relative_to(root).as_posix()] = data.decode("utf-8", "replace")
    return out


def _leaks(texts: dict[str, str], secrets=S) -> list[str]:
    return [f"{name}: {k}" for name, t in texts.items() for k, s in secrets.items() if s in t]


def _parses(root: Path) -> list[str]:
    """The files of ``root`` that no longer parse as their suffix says."""
    bad = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        name = path.name.removesuffix(".gz")
        try:
            if name.endswith(".json"):
                json.loads(raw)
            elif name.endswith((".yaml", ".yml")):
                yaml.safe_load(raw)
            elif name.endswith(".html"):
                text = raw.decode()
                parser = html.parser.HTMLParser()
                parser.feed(text)
                parser.close()
                # The marker is text on the page, never a tag a browser would hide.
                assert "<redacted>" not in text.split("<script>")[0]
        except Exception as exc:
            bad.append(f"{path}: {exc!r}")
    return bad


def test_the_run_holds_every_planted_secret(leaky):
    # The test means something only if the trial really wrote them all.
    run, _ = leaky
    rd = RunDir(run)
    logs = (rd.artifact_dir("leaky", 0) / "stdout.log").read_text()
    logs += (rd.artifact_dir("leaky", 0) / "stderr.log").read_text()
    assert [k for k, s in S.items() if s not in logs] == []


def test_a_bundle_from_a_clean_shell_holds_no_secret_and_every_file_parses(leaky):
    _, root = leaky
    texts = _texts(root)
    assert _leaks(texts) == []
    assert _parses(root) == []
    # What was redacted is still readable, and ordinary words were left alone.
    log = texts["cells/leaky/trial_0000/stdout.log"]
    assert "num_tokens: 4096, processed 1024 tokens" in log
    assert "mysql://root:<redacted>@db:3306/app" in log
    assert "-----BEGIN RSA PRIVATE KEY-----" in log
    # The text file named *.png was scanned (by content), a real PNG was not.
    manifest = json.loads(texts["bundle_manifest.json"])
    files = {f["path"]: f for f in manifest["files"]}
    assert files["cells/leaky/trial_0000/notes.png"]["redactions"] >= 2
    assert files["report/ratio_forest.png"]["note"] == "image, not scanned"
    # The run's secret hashes never travel; the resolved recipe only as its redacted copy.
    left = {e["path"]: e["reason"] for e in manifest["left_out"]}
    assert "secret_hashes.json" in left and "secret_hashes.json" not in texts
    assert yaml.safe_load(texts["recipe.resolved.yaml"])["cells"][1]["extra_env"] == {
        "HF_TOKEN": "<redacted>"
    }


def test_the_report_page_and_files_in_the_run_directory_hold_no_secret(leaky):
    # Before: report/report.html embedded recipe.resolved.yaml and raw log tails in clear.
    run, _ = leaky
    report = RunDir(run).report_dir
    texts = _texts(report)
    assert "report.html" in texts and "report.md" in texts
    assert _leaks(texts) == []
    assert _parses(report) == []
    page = texts["report.html"]
    assert "&lt;redacted&gt;" in page  # the recipe's HF_TOKEN, the log tails


def test_the_console_summary_holds_no_secret(leaky):
    run, _ = leaky
    summary = (run.parents[3] / "console.txt").read_text()
    assert "leaky" in summary and _leaks({"console": summary}) == []


def test_matrix_files_and_records_of_the_run_hold_no_secret(leaky):
    # The sweep writes them; the records' signature_line was not redacted before.
    run, _ = leaky
    rd = RunDir(run)
    texts = {
        n: p.read_text()
        for n, p in {
            "matrix.md": rd.path / "matrix.md",
            "matrix.json": rd.path / "matrix.json",
            "record": rd.trial_path("leaky", 0),
        }.items()
    }
    assert _leaks(texts) == []
    rec = TrialRecord.model_validate_json(texts["record"])
    assert rec.signature == "out_of_memory" and "<redacted>" in (rec.signature_line or "")


def test_the_run_keeps_no_secret_in_clear_but_its_private_recipe(leaky):
    # Before: recipe.resolved.yaml held extra_env secrets in a 0644 file.
    run, _ = leaky
    rd = RunDir(run)
    assert stat.S_IMODE(rd.recipe_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(rd.secret_hashes_path.stat().st_mode) == 0o600
    hashes = rd.secret_hashes_path.read_text()
    assert _leaks({"secret_hashes.json": hashes}) == []
    # `aorta sweep run --recipe recipe.resolved.yaml` still reads it as written.
    again = load_recipe(rd.recipe_path)
    assert again.cells[1].extra_env == {"HF_TOKEN": S["extra_env"]}


def test_the_page_embeds_only_logs_inside_the_run(leaky, tmp_path):
    # Before: report --html embedded the tail of any .log a record named, absolute or ../.
    run, _ = leaky
    outside = tmp_path / "private.log"
    outside.write_text("OUTSIDE-FILE-CONTENT-123\n")
    rd = RunDir(run)
    path = rd.trial_path("leaky", 0)
    original = path.read_bytes()
    rec = TrialRecord.model_validate_json(original)
    rel = os.path.relpath(outside, rd.path)
    arts = {**rec.artifacts, "absolute": str(outside), "dotdot": rel}
    try:
        path.write_bytes(rec.model_copy(update={"artifacts": arts}).to_json())
        page = html_page(run, output=tmp_path / "page.html", resamples=200).read_text()
    finally:
        path.write_bytes(original)
    assert "OUTSIDE-FILE-CONTENT-123" not in page
    assert "RuntimeError: CUDA out of memory" in page  # the run's own log tail is there


def test_symbolic_links_are_listed_as_left_out(leaky, tmp_path):
    # Before: a link in the run was skipped without a word in the bundle's manifest.
    run, _ = leaky
    target = tmp_path / "elsewhere.txt"
    target.write_text("x")
    link = RunDir(run).artifact_dir("leaky", 0) / "latest"
    link.symlink_to(target)
    try:
        plan = plan_bundle(run, env={})
    finally:
        link.unlink()
    left = {e.path: e.note for e in plan.left_out}
    assert "symbolic link" in left["cells/leaky/trial_0000/latest"]
    assert str(target) in left["cells/leaky/trial_0000/latest"]


# --- the property over real sweeps ---------------------------------------------------------

_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.+="
# A secret has a letter and a digit: a bare identifier such as "total_iterations" is also a
# field name aorta writes itself, and field names are not masked (docs/reliability.md).
planted = st.text(alphabet=_ALPHABET, min_size=10, max_size=32).filter(
    lambda s: (
        s[0].isalnum()
        and s[-1].isalnum()
        and any(c.isalpha() for c in s)
        and any(c.isdigit() for c in s)
    )
)


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(env_s=planted, argv_s=planted, file_s=planted, cluster_s=planted)
def test_property_no_bundle_or_page_holds_a_planted_secret(
    tmp_path_factory, env_s, argv_s, file_s, cluster_s
):
    """Random secrets in extra_env, argv, the sweep's environment and a collected file (shape
    known only from argv: ``--api-key``), echoed shapeless into logs, a collected file, trace
    metadata and the record's signature line: no bundle (made with an empty environment) and
    no report page holds one, and every bundled YAML/JSON/HTML file parses."""
    secrets = {"env": env_s, "argv": argv_s, "file": file_s, "cluster": cluster_s}
    tmp = tmp_path_factory.mktemp("prop")
    script = (
        'echo "$1 $2"; echo "$MY_APP_TOKEN"; echo "$SITE_SECRET"\n'
        f'printf "%s\\n" "$2" {shlex.quote(file_s)} > "$AORTA_ARTIFACT_DIR/collected.txt"\n'
        'mkdir -p "$AORTA_ARTIFACT_DIR/trace"\n'
        'printf \'{"traceEvents": [], "metadata": {"a": "%s"}}\' "$MY_APP_TOKEN" '
        '| gzip > "$AORTA_ARTIFACT_DIR/trace/rank0.pt.trace.json.gz"\n'
        'echo "RuntimeError: CUDA out of memory at $SITE_SECRET $2" >&2; exit 1\n'
    )
    recipe = (
        "trials: 1\ncells:\n  - {name: base, mitigations: [none]}\n"
        f"  - {{name: x, mitigations: [none], extra_env: {{MY_APP_TOKEN: {json.dumps(env_s)}}}}}\n"
    )
    argv = ["--api-key", argv_s, f"--password={file_s}"]
    run = _run(tmp, script, argv, recipe, {"SITE_SECRET": cluster_s})
    page = html_page(run, resamples=200).read_text()
    write_report(run, resamples=200)
    archive = write_bundle(plan_bundle(run, env={}), tmp / "out")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp / "x", filter="data")
    root = next((tmp / "x").iterdir())
    texts = {**_texts(root), **_texts(RunDir(run).report_dir), "page": page}
    assert _leaks(texts, secrets) == []
    assert _parses(root) == []
