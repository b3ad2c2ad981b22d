"""A recipe's own fields are aorta's vocabulary, not secrets: ``required_for_pass`` (every
custom pattern's, written out by ``recipe show --resolved`` and in ``recipe.resolved.yaml``)
and ``retain.on_pass`` end in ``PASS``, a password's abbreviation to the name rule, so their
values printed as ``<redacted>``, a bundled ``recipe.resolved.yaml`` no longer loaded, and a
retention level (``summary``) became a known secret masked in every other line. The secrets
beside them are still masked."""

from __future__ import annotations

from collections.abc import Iterator

from aorta.errors import ExitCode
from aorta.recipe import dump_recipe, load_recipe_text
from aorta.recipe.fields import StrictModel
from aorta.store.redact import OWN_NAMES, Redactor, yaml_counted

TOKEN = "hf_s3cretVALUE99"
RECIPE = f"""\
workload: matmul
extra_env: {{HF_TOKEN: {TOKEN}, DB_PASS: pw-Sw0rdfish-77}}
retain: {{on_pass: summary, on_fail: full}}
custom_patterns:
  - id: nan_loss
    match: {{regex: 'loss is nan'}}
cells: [{{name: a, mitigations: [none]}}]
"""


def test_recipe_show_resolved_masks_secrets_only(run_cli, write):
    path = write("r.yaml", RECIPE)
    code, out, err = run_cli("recipe", "show", path, "--resolved")
    assert code == ExitCode.OK, err
    assert "required_for_pass: false" in out and "on_pass: summary" in out, out
    assert out.count("<redacted>") == 2 and TOKEN not in out, out  # HF_TOKEN, DB_PASS


def test_a_redacted_resolved_recipe_still_loads_as_the_recipe():
    recipe = load_recipe_text(RECIPE)
    redactor = Redactor.for_run(env=recipe.extra_env)
    text, n = yaml_counted(redactor, dump_recipe(recipe))
    assert n == 2  # the two secrets, nothing of aorta's own
    again = load_recipe_text(text)
    assert again.retain == recipe.retain and again.custom_patterns == recipe.custom_patterns
    assert again.extra_env["HF_TOKEN"] == "<redacted>"


def _recipe_models(base: type[StrictModel]) -> Iterator[type[StrictModel]]:
    # Every recipe model derives from the one strict base, whichever module of aorta.recipe
    # holds it.
    for model in base.__subclasses__():
        yield model
        yield from _recipe_models(model)


def test_every_recipe_field_the_name_rule_takes_for_a_secret_is_an_own_name():
    # A new recipe field ending in TOKEN, KEY, PASS … is either added to OWN_NAMES (aorta's
    # vocabulary) or a real secret; this says which, once.
    flagged = {
        name
        for model in _recipe_models(StrictModel)
        for name in model.model_fields
        if Redactor().is_secret_name(name) or name in OWN_NAMES
    }
    assert flagged == OWN_NAMES
    assert not any(Redactor().is_secret_name(n) for n in OWN_NAMES)
    assert Redactor(scrub_keys=("on_*",)).is_secret_name("on_pass")  # a user's glob still does
    assert Redactor().is_secret_name("DB_PASS") and Redactor().is_secret_name("password")
