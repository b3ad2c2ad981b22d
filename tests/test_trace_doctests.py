"""Run the docstring examples of the trace modules (they are the API's documentation)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "aorta.trace",
    "aorta.trace._links",
    "aorta.trace.classify",
    "aorta.trace.collectives",
    "aorta.trace.gemm",
    "aorta.trace.loader",
    "aorta.trace.merge",
    "aorta.trace.model",
    "aorta.trace.steps",
    "aorta.trace.summary",
    "aorta.trace.tables",
    "aorta.trace.testing",
    "aorta.trace.timeline",
    "aorta.plot.trace",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    result = doctest.testmod(
        importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.failed == 0
