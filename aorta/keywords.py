"""The one rule by which a public function's keywords override its ``options=`` value
(:func:`aorta.compare`'s ``alpha=`` … its ``StatsOptions``, :func:`aorta.sweep`'s ``output=``
… its ``RunOptions``): a keyword replaces its field (a statistics keyword's ``None`` leaves
it: a CLI flag not given); one that is no field is a ``TypeError``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    Options = TypeVar("Options", bound=DataclassInstance)
else:
    Options = TypeVar("Options")

__all__ = ["with_keywords"]


def with_keywords(
    options: Options, keywords: Mapping[str, object], *, what: str, none_leaves: bool = False
) -> Options:
    """``options`` (a frozen dataclass) with each of ``keywords`` replacing its field, except a
    ``None`` with ``none_leaves`` (the statistics keywords: a CLI flag not given); ``what``
    names the options in the error.

    Raises ``TypeError`` for a keyword that is not a field, naming the fields.

    Examples
    --------
    >>> from aorta.matrix.options import StatsOptions
    >>> with_keywords(StatsOptions(), {"alpha": 0.01, "seed": None}, what="x", none_leaves=True).seed
    0
    >>> with_keywords(StatsOptions(), {"alpah": 0.01}, what="the statistics options")
    Traceback (most recent call last):
    ...
    TypeError: unexpected keyword argument 'alpah' (the statistics options are alpha, ranks, resamples, seed, stat, threshold, trials)
    """
    fields = sorted(f.name for f in dataclasses.fields(options))
    unknown = sorted(set(keywords) - set(fields))
    if unknown:
        raise TypeError(
            f"unexpected keyword argument {unknown[0]!r} ({what} are {', '.join(fields)})"
        )
    given = {k: v for k, v in keywords.items() if not (none_leaves and v is None)}
    return dataclasses.replace(options, **given) if given else options
