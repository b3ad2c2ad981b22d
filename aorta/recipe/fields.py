"""The vocabulary every recipe model is written in: the strict base model, the validated field
types (environment names and values, ``workload_config`` keys), the validators the models
share and the rules of a cell's name.

Each validator raises :func:`aorta.errors.invalid`, so pydantic reports its message word for
word, located by the field it sits on.

Examples
--------
>>> from pydantic import ValidationError
>>> class Block(StrictModel):
...     count: int = 1
>>> try:
...     Block.model_validate({"cuont": 2})
... except ValidationError as exc:
...     print(exc.errors()[0]["msg"])
unknown key 'cuont'; did you mean 'count'? (allowed: count)
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

from aorta import envvars
from aorta.errors import describe_value
from aorta.errors import invalid as _fail
from aorta.recipe.limits import name_bytes_problem

__all__ = [
    "CELL_NAME_RE",
    "RESERVED_CELL_NAMES",
    "ConfigKey",
    "ConfigMap",
    "EnvMap",
    "EnvName",
    "EnvValue",
    "StrictModel",
    "check_count",
    "check_mitigation_list",
    "check_name_bytes",
    "closest",
]

CELL_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
#: Names a cell may not take: its folder is ``cells/<name>``, where these would not be a folder
#: of its own. (The run's files — matrix.md, … — sit beside ``cells/``, not in it, so a cell may
#: share their names.)
RESERVED_CELL_NAMES = frozenset({".", ".."})
RESERVED_CONFIG_KEYS = frozenset({"steps"})
RESERVED_CONFIG_PREFIX = "_aorta_"


# --------------------------------------------------------------------------------------------
# small helpers shared by the validators


def closest(word: str, choices: Iterable[str]) -> str:
    """The suffix of an error that suggests the choice nearest ``word`` ("" when none is near).

    >>> closest("trails", ["trials", "steps"]), closest("xyz", ["trials"])
    ("; did you mean 'trials'?", '')
    """
    match = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {match[0]!r}?" if match else ""


def _check_env_name(name: Any) -> Any:
    problem = envvars.name_problem(name)
    if problem:
        raise _fail("env_name", problem)
    return name


def _check_env_value(val: Any) -> Any:
    problem = envvars.value_problem(val)
    if problem:
        raise _fail("env_value", problem)
    return val


def _check_config_key(key: Any) -> Any:
    if not isinstance(key, str):
        raise _fail("config_key", f"keys must be strings, got {describe_value(key)}")
    if key in RESERVED_CONFIG_KEYS:
        raise _fail(
            "config_reserved",
            f"{key!r} is reserved: set the recipe's or the cell's top-level {key!r} instead",
        )
    if key.startswith(RESERVED_CONFIG_PREFIX):
        raise _fail(
            "config_reserved",
            f"keys starting with {RESERVED_CONFIG_PREFIX!r} are reserved for aorta, got {key!r}",
        )
    return key


EnvName = Annotated[str, BeforeValidator(_check_env_name)]
EnvValue = Annotated[str, BeforeValidator(_check_env_value)]
EnvMap = dict[EnvName, EnvValue]
ConfigKey = Annotated[str, BeforeValidator(_check_config_key)]
ConfigMap = dict[ConfigKey, Any]


def check_count(value: Any) -> Any:
    """A count's ``mode="before"`` validator: a boolean is not a number of trials or steps."""
    # Strict ints already reject booleans; say so in words a YAML author recognises.
    if isinstance(value, bool):
        raise _fail("count", f"must be a whole number ≥ 1, got {describe_value(value)}")
    return value


def check_name_bytes(value: Any) -> Any:
    """A name's validator: at most :data:`~aorta.recipe.limits.MAX_NAME_BYTES` in UTF-8."""
    problem = name_bytes_problem(value) if isinstance(value, str) else None
    if problem:
        raise _fail("name_length", problem)
    return value


class StrictModel(BaseModel):
    """Base of every recipe model: strict types, unknown keys rejected with the allowed list."""

    model_config = ConfigDict(strict=True, extra="forbid", validate_default=False)

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            allowed = list(cls.model_fields)
            for key in data:
                if key not in cls.model_fields:
                    raise _fail(
                        "unknown_key",
                        f"unknown key {key!r}{closest(str(key), allowed)} (allowed: {', '.join(allowed)})",
                    )
        elif data is not None and not isinstance(data, BaseModel):
            raise _fail("mapping", f"must be a mapping, got {describe_value(data)}")
        return data


def check_mitigation_list(value: Any) -> Any:
    """A list of mitigation names' ``mode="before"`` validator: non-empty, of non-empty strings."""
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        shown = repr(value) if isinstance(value, str) else describe_value(value)
        raise _fail("mitigations", f"must be a non-empty list of names, got {shown}")
    return value
