"""The recipe's ``redaction:`` block is applied to what a run writes (a real sweep)."""

from __future__ import annotations

import pytest

from aorta.matrix.load import load_run
from aorta.recipe import load_recipe_text
from aorta.run.sweep import sweep
from aorta.store.redact import Redactor
from aorta.store.rundir import RunDir
from tests.workloads_fixture import TEST_WORKLOADS

SECRET = "hf_s3cr3t_value_42"
DB = "db-password-777"

RECIPE = f"""
workload: env_probe
trials: 1
redaction:
  scrub_env_keys: ["DB_*"]
  scrub_ip_addresses: true
cells:
  - {{name: token, mitigations: [none], workload_config: {{var: HF_TOKEN}},
      extra_env: {{HF_TOKEN: "{SECRET}"}}}}
  - {{name: scrubbed, mitigations: [none], workload_config: {{var: DB_CONN}},
      extra_env: {{DB_CONN: "{DB}"}}}}
  - {{name: address, mitigations: [none], workload_config: {{var: PEER}},
      extra_env: {{PEER: "10.20.30.40"}}}}
"""


@pytest.mark.slow
def test_secrets_and_scrubbed_values_never_reach_the_run_files(tmp_path):
    result = sweep(
        load_recipe_text(RECIPE), output=tmp_path, progress="none", workloads=TEST_WORKLOADS
    )
    rd = RunDir(result.run_dir)
    # The trials saw the real values (redaction is about what is written, not what runs) ...
    assert {r.cell: r.info["value"] for r in result.records} == {
        "token": "<redacted>",
        "scrubbed": "<redacted>",
        "address": "<ip>",
    }
    # ... and no file but the resumable recipe holds them.
    leaks = []
    for path in rd.path.rglob("*"):
        if path.is_file() and path != rd.recipe_path:
            data = path.read_bytes()
            leaks += [f"{path}: {s}" for s in (SECRET, DB, "10.20.30.40") if s.encode() in data]
    assert leaks == []
    cell = rd.cell_json("token").read_text()
    assert "HF_TOKEN" in cell and "<redacted>" in cell
    assert rd.results_path.is_file()  # results.nc was among the files scanned
    assert load_run(rd.path).sizes["cell"] == 3


def test_redactor_masks_whole_values_longest_first_and_leaves_short_ones_and_words():
    # Values shorter than MIN_SECRET_LEN (6) or all digits are not looked for in text ("on",
    # a count), and a value is masked only where it stands as a token or between separators,
    # never inside a longer word.
    env = {"A_TOKEN": "abcdefgh", "B_TOKEN": "abcdefgh-ij", "C_KEY": "on", "N_TOKEN": "4096"}
    r = Redactor.for_run(env=env)
    text = "x abcdefgh-ij y abcdefgh z on, 4096 tokens, xabcdefghx, k=abcdefgh."
    assert r.text(text) == (
        "x <redacted> y <redacted> z on, 4096 tokens, xabcdefghx, k=<redacted>."
    )
