"""What merely looks like a secret is left alone — and only that (#48's redaction false
positives in ``aorta recipe show``). Each case below was masked before: ``key: bf16`` in a
description, a user's ``SORT_KEY``, and a signature's regex ``token: expired`` whose
``expired`` became a secret word of the run (an id ``token_expired`` printed
``token_<redacted>``). Beside each, the real secrets of the same shape that stay masked."""

from __future__ import annotations

import json

import pytest

from aorta.errors import ExitCode
from aorta.store.redact import Redactor, harvest_secrets
from aorta.store.rundir import RunDir
from aorta.store.secrets import is_secret_name, mask_assignments, secret_shape_values

HF = "hf_realSecretValue12345678"
RECIPE = f"""\
mode: probe
ticket: RED
description: "autocast with key: bf16 for the matmuls"
trials: 1
mitigation_axis: [none]
extra_env:
  SORT_KEY: by_duration
  HF_TOKEN: {HF}
  DB_PASSWORD: letmein
custom_patterns:
  - id: token_expired
    match: {{regex: 'token: expired'}}
    hint: "the auth token: expired, refresh it"
"""


@pytest.mark.parametrize("name", ["SORT_KEY", "PARTITION_KEY", "shardKey", "FOREIGN_KEY"])
def test_a_key_that_names_a_place_in_data_is_no_secret(name):
    assert not is_secret_name(name)
    assert mask_assignments(f"{name}=by_duration") == (f"{name}=by_duration", 0)


@pytest.mark.parametrize(
    "name",
    # A credential's KEY whatever precedes it; a lookup word with a secret part is secret too.
    ["API_KEY", "PRIMARY_KEY", "ROUTING_KEY", "HASH_KEY", "GROUP_KEY", "SECRET_SORT_KEY",
     "SORT_KEY_PASSWORD", "KEY", "SSH_KEY"],
)  # fmt: skip
def test_every_other_key_is_still_secret(name):
    assert is_secret_name(name)
    assert mask_assignments(f"{name}=by_duration") == (f"{name}=<redacted>", 1)


def test_a_short_value_after_a_bare_key_or_token_is_prose():
    assert mask_assignments("autocast with key: bf16, token=abc") == (
        "autocast with key: bf16, token=abc",
        0,
    )
    # A generated key is longer; a password or a secret is masked at any length.
    masked = "key: <redacted> TOKEN=<redacted> pass: <redacted> secret=<redacted>"
    assert mask_assignments("key: Zq8vLm TOKEN=abc123 pass: ab secret=xy") == (masked, 4)
    assert mask_assignments("API_KEY=ab1") == ("API_KEY=<redacted>", 1)


def test_a_plain_word_after_a_token_is_no_secret_word_but_a_password_is():
    text = "token: expired\n--api-key invalid\n--password hunter\npostgres://u:sesame@db"
    assert sorted(secret_shape_values(text, plain_words=False)) == ["hunter", "sesame"]
    # The shape rules find them all still (what is shown is masked as before).
    assert sorted(secret_shape_values(text)) == ["expired", "hunter", "invalid", "sesame"]
    # A token that is not a short plain word is a secret word.
    assert secret_shape_values("token: expired2x", plain_words=False) == ["expired2x"]
    assert secret_shape_values("--hf-token Expired", plain_words=False) == ["Expired"]


def test_the_recipes_own_prose_and_patterns_are_not_harvested(tmp_path):
    data = {
        "description": "key: AbCdEf123456 and token: s3cr3tValue42",
        "custom_patterns": [
            {"id": "x", "match": {"regex": "token: zz9TopSecret", "condition": "True"}, "hint": "h"}
        ],
        "command": ["train.py", "--token", "argvTok3n99", "--password", "pw"],
        "extra_env": {"WANDB_API_KEY": "wandbKey0042", "NOTE": "token: inNoteValue7"},
    }
    # argv after a secret flag and a secret-named value: whole; a shape in another value: yes.
    assert harvest_secrets(data=[data]) == {"argvTok3n99", "wandbKey0042", "inNoteValue7"}


def test_recipe_show_prints_what_only_looked_like_a_secret(tmp_path, run_cli):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    for extra in ([], ["--resolved"]):
        code, out, err = run_cli("recipe", "show", *extra, recipe)
        assert code == ExitCode.OK, err
        assert "description: 'autocast with key: bf16 for the matmuls'" in out
        assert "SORT_KEY: by_duration" in out
        assert "- id: token_expired" in out
        # The real secrets, and the regex's shape where it is shown, are masked as before.
        assert HF not in out and "letmein" not in out
        assert "HF_TOKEN: <redacted>" in out and "DB_PASSWORD: <redacted>" in out
        assert "regex: 'token: <redacted>'" in out


@pytest.mark.slow
def test_a_sweep_of_that_recipe_knows_no_plain_word_as_a_secret(tmp_path, run_cli):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    code, out, err = run_cli(
        "sweep", "run", "--recipe", recipe, "-o", tmp_path / "out",
        "--", "bash", "-c", "echo 'token: expired'",
    )  # fmt: skip
    assert code == ExitCode.OK, out + err
    (path,) = (tmp_path / "out" / "RED" / "command").iterdir()
    # The record's error names the signature whole (it was custom:token_<redacted>); the
    # matched line keeps its shape's mask.
    record = json.loads((path / "cells" / "none-none" / "trial_0000.json").read_text())
    assert record["error"] == "the output matched custom:token_expired: token: <redacted>"
    assert "custom:token_expired: stdout.log:1" in out
    redactor = Redactor.of_run(RunDir(path), env={})
    line = "token_expired: the lease expired, sorted by_duration with bf16"
    assert redactor.text(line) == line
    assert redactor.text(f"login {HF} pw letmein") == "login <redacted> pw <redacted>"
