"""What merely looks like a secret is left alone — and only that (#48's redaction false
positives in ``aorta recipe show``). Each case below was masked before: ``key: bf16`` in a
description, a user's ``SORT_KEY``, and a signature's regex ``token: expired`` whose
``expired`` became a secret word of the run (an id ``token_expired`` printed
``token_<redacted>``). Beside each, the real secrets of the same shape that stay masked."""

from __future__ import annotations

import io
import json

import pytest

from aorta.errors import ExitCode
from aorta.store.redact import Redactor, harvest_secrets
from aorta.store.redact_stream import redact_file
from aorta.store.rundir import RunDir
from aorta.store.secrets import (
    SECRET_FLAG,
    is_secret_flag,
    is_secret_name,
    mask_assignments,
    redact_secret_shapes,
    secret_shape_values,
)

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


# -- a PIN is a secret name; a PIN that pins work to hardware is not ------------------------


@pytest.mark.parametrize(
    "name",
    ["PIN", "pin", "pincode", "pin_code", "PIN_CODE", "pinCode", "PIN_NUMBER", "SIM_PIN",
     "USER_PIN", "HSM_PIN", "YUBIKEY_PIN", "CPU_PIN_SECRET"],
)  # fmt: skip
def test_a_pin_is_a_secret_name(name):
    # It was none of them: `PIN=4821` and `"pin_code": "0000"` printed in clear.
    assert is_secret_name(name)
    assert mask_assignments(f"{name}=4821") == (f"{name}=<redacted>", 1)  # all digits: still
    assert mask_assignments(f'"{name}": "0000"') == (f'"{name}": "<redacted>"', 1)


@pytest.mark.parametrize("name", ["PIN_MEMORY", "pin_memory", "CPU_PIN", "numa_pin", "SPIN"])
def test_pinning_work_to_hardware_is_no_pin(name):
    assert not is_secret_name(name)
    assert mask_assignments(f"{name}=0-7") == (f"{name}=0-7", 0)


def test_a_pin_is_masked_in_the_environment_argv_and_recipe_data():
    redactor = Redactor.for_run(env={"SIM_PIN": "482913", "NCCL_DEBUG": "INFO"})
    assert redactor.env({"SIM_PIN": "482913", "CPU_PIN": "0-7"}) == {
        "SIM_PIN": "<redacted>",
        "CPU_PIN": "0-7",
    }
    assert redactor.text("pin: 4821 --pin 4821 --pin-code=0000 --pin-memory True") == (
        "pin: <redacted> --pin <redacted> --pin-code=<redacted> --pin-memory True"
    )
    assert redactor.data({"cmd": ["app", "--pin", "4821"], "pinCode": 4821}) == {
        "cmd": ["app", "--pin", "<redacted>"],
        "pinCode": "<redacted>",
    }
    # A PIN worth looking for (6 characters, not all digits: MIN_SECRET_LEN) is known
    # wherever it stands alone afterwards.
    known = Redactor.for_run(env={"HSM_PIN": "k4Z9x2"})
    assert known.text("login with k4Z9x2 ok") == "login with <redacted> ok"


@pytest.mark.parametrize("flag", ["--cpu-pin", "--numa-pin", "--gpu-pin", "--core_pin"])
def test_a_flag_that_pins_work_to_hardware_is_kept_as_its_env_name_is(flag, tmp_path):
    # `--cpu-pin 0-3` read `--cpu-pin <redacted>` once `--pin` was a secret flag, while
    # CPU_PIN=0-3 was kept: the flag now follows the names' rule, in text, argv data, JSON.
    redactor = Redactor.for_run(env={"NCCL_DEBUG": "INFO"})
    line = f"train.py {flag} 0-3 {flag}=4 --pin-memory true --pin 4821 --pin-code 0000"
    assert redactor.text(line) == (
        f"train.py {flag} 0-3 {flag}=4 --pin-memory true --pin <redacted> --pin-code <redacted>"
    )
    assert secret_shape_values(line) == ["4821", "0000"]
    argv = ["app", flag, "0-3", "--pin-memory", "1", "--pincode", "4821"]
    assert redactor.data({"cmd": argv}) == {"cmd": [*argv[:-1], "<redacted>"]}
    path = tmp_path / "argv.json"
    path.write_text(json.dumps({"cmd": argv}))
    out = io.BytesIO()
    assert redact_file(path, out, redactor, limit=1 << 20) == 1
    assert json.loads(out.getvalue()) == {"cmd": [*argv[:-1], "<redacted>"]}


@pytest.mark.parametrize(
    "name",
    ["pin", "pin-code", "pincode", "sim-pin", "hsm_pin", "cpu-pin", "numa-pin", "pin-memory",
     "cpu-pin-code", "secret-cpu-pin", "hf-token", "password", "api-key", "tokens"],
)  # fmt: skip
def test_one_rule_for_a_secret_name_and_a_secret_flag(name):
    # Where the flag's shape could hold a secret at all, its name decides, as an env name's.
    shaped = SECRET_FLAG.fullmatch(f"--{name}") is not None
    assert is_secret_flag(f"--{name}") == (shaped and is_secret_name(name))
    assert redact_secret_shapes(f"--{name} 4821").endswith("<redacted>") == is_secret_flag(
        f"--{name}"
    )


def test_a_number_under_a_password_or_pin_name_is_masked_in_json_and_data(tmp_path):
    # JSON and YAML read `"pin": 4821` as a number: it was kept under every secret name.
    data = {"DB_PASSWORD": 123456, "pin": -4821, "MAX_TOKEN": 4096, "auth": True, "n": 3}
    assert Redactor().data_counted(data) == (
        {"DB_PASSWORD": "<redacted>", "pin": "<redacted>", "MAX_TOKEN": 4096, "auth": True, "n": 3},
        2,
    )
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(data))
    out = io.BytesIO()
    assert redact_file(path, out, Redactor(), limit=1 << 20) == 2
    assert json.loads(out.getvalue()) == {
        "DB_PASSWORD": "<redacted>", "pin": "<redacted>", "MAX_TOKEN": 4096, "auth": True, "n": 3
    }  # fmt: skip


# -- a secret-shaped pattern in the recipe's own text is the recipe's, not a secret ---------

PATTERN_RECIPE = f"""\
mode: probe
ticket: RED
trials: 1
mitigation_axis: [none]
step_time_regex: 'auth_token=Zq8vLm2pR4xT step (?P<ms>[0-9.]+)'
extra_env:
  HF_TOKEN: {HF}
custom_patterns:
  - id: bad_grant
    match: {{regex: 'api_key=InvalidGrant4Client rejected'}}
  - id: shown_too
    match: {{regex: 'password: Hunter2Hunter2'}}
command: [train.py, --password, Sw0rdfish77, --token, argvTok3n99]
"""


def _sweep_secrets(text: str) -> set[str]:
    # What a sweep harvests from its recipe (aorta.run.sweep): its text and its data.
    from aorta.recipe import dump_recipe, load_recipe_text

    recipe = load_recipe_text(text)
    return harvest_secrets({}, texts=[dump_recipe(recipe)], data=[recipe.model_dump(mode="json")])


def test_a_secret_shaped_pattern_is_not_harvested_from_the_recipes_text():
    # Harvested from the recipe's text, `InvalidGrant4Client` masked every log line naming
    # it — the very line the signature looks for — and the step regex's value every step line.
    assert _sweep_secrets(PATTERN_RECIPE) == {HF, "Sw0rdfish77", "argvTok3n99"}
    redactor = Redactor().with_values(_sweep_secrets(PATTERN_RECIPE))
    line = "grant InvalidGrant4Client rejected; Zq8vLm2pR4xT step 12.5; Hunter2Hunter2"
    assert redactor.text(line) == line
    # Where a pattern's shape is shown it is masked as before, and the real secrets everywhere.
    assert redactor.text("api_key=InvalidGrant4Client") == "api_key=<redacted>"
    assert redactor.text(f"{HF} Sw0rdfish77 argvTok3n99") == "<redacted> <redacted> <redacted>"


def test_a_pattern_value_the_recipe_also_holds_as_a_secret_stays_one():
    # The same value under a secret name, after a secret flag, or in a shape elsewhere in the
    # data is a secret, though a pattern shows it too.
    recipe = PATTERN_RECIPE.replace(
        "HF_TOKEN: ",
        "DB_PASSWORD: Hunter2Hunter2\n  NOTE: 'auth=InvalidGrant4Client'\n  HF_TOKEN: ",
    ).replace("argvTok3n99", "Zq8vLm2pR4xT")
    assert _sweep_secrets(recipe) == {
        HF,
        "Sw0rdfish77",
        "Zq8vLm2pR4xT",
        "Hunter2Hunter2",
        "InvalidGrant4Client",
    }


def test_texts_without_data_are_harvested_whole():
    # Only the data's own prose says what is a pattern: argv alone keeps every shape.
    assert harvest_secrets(texts=["regex: 'api_key=InvalidGrant4Client rejected'"]) == {
        "InvalidGrant4Client"
    }
