"""What to run, pure: the recipe schema, YAML with located errors, the mitigation and
environment registry, and the plan (cells × trials); and the other files a user writes — the
cluster file (where a launch runs, :mod:`~aorta.recipe.cluster`) and a CVS config
(:mod:`~aorta.recipe.cvs`). Reads files; writes none.

>>> from aorta.recipe import load_recipe_text, plan
>>> p = plan(load_recipe_text("cells: [{name: base, mitigations: [none]}]", command=["true"]))
>>> [c.name for c in p.cells], p.baseline
(['base'], 'base')
"""

from aorta.recipe.flags import recipe_from_flags, split_axis
from aorta.recipe.load import (
    dump_recipe,
    load_recipe,
    load_recipe_pending_command,
    load_recipe_text,
)
from aorta.recipe.model import Recipe
from aorta.recipe.plan import Cell, Plan, plan
from aorta.recipe.registry import Environment, Mitigation, Registry

__all__ = [
    "Cell",
    "Environment",
    "Mitigation",
    "Plan",
    "Recipe",
    "Registry",
    "dump_recipe",
    "load_recipe",
    "load_recipe_pending_command",
    "load_recipe_text",
    "plan",
    "recipe_from_flags",
    "split_axis",
]
