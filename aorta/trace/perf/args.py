"""The shared parts of the perf model: element sizes and precisions of Kineto ``Input type``
names, :class:`OpModel`, and readers of an op's ``Input Dims`` / ``Input type`` / ``Concrete
Inputs`` (the latter are strings: ``'[1, 1]'``, ``'False'``, ``''``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

__all__ = [
    "Args",
    "OpModel",
    "bpe",
    "broadcast",
    "concrete_at",
    "dims_at",
    "flag",
    "flags",
    "ints",
    "numel",
    "precision",
    "type_at",
]

#: Bytes per element of each ``Input type`` name (``Scalar`` is TraceLens's 4 bytes).
_BPE: dict[str, int] = {
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "float": 4,
    "double": 8,
    "long int": 8,
    "long": 8,  # older Kineto writes "long" for int64
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "Scalar": 4,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
}
_PRECISION: dict[str, str] = {
    "c10::Half": "fp16",
    "c10::BFloat16": "bf16",
    "float": "fp32",
    "double": "fp64",
    "signed char": "int8",
}


def bpe(dtype: str | None) -> int | None:
    """Bytes per element of a Kineto ``Input type`` name (``None`` when unknown).

    Examples
    --------
    ``Float4_e2m1fn_x2`` packs two FP4 values in each of its (1-byte) elements.

    >>> bpe("c10::BFloat16"), bpe("float"), bpe("c10::Float8_e4m3fn"), bpe("TensorList")
    (2, 4, 1, None)
    """
    if not dtype:
        return None
    if dtype in _BPE:
        return _BPE[dtype]
    if "Float8" in dtype or "Float4" in dtype:
        return 1
    return None


def precision(dtype: str | None) -> str | None:
    """The roofline precision (``bf16``, ``fp16``, ``fp32``, ``fp64``, ``fp8``, ``fp4``,
    ``int8``) of a dtype.

    Examples
    --------
    >>> precision("c10::BFloat16"), precision("c10::Float8_e4m3fnuz"), precision("long int")
    ('bf16', 'fp8', None)
    """
    if not dtype:
        return None
    if "Float8" in dtype:
        return "fp8"
    if "Float4" in dtype:
        return "fp4"
    return _PRECISION.get(dtype)


@dataclass(frozen=True)
class OpModel:
    """The model of one op call: ``family``, ``flops`` and ``bytes`` per call, the roofline
    ``unit`` (``matrix`` or ``vector``) and ``dtype`` (the first input's), and the shape
    parameters (``params``, in the family's order).

    ``typed`` and ``strided`` are the argument positions whose ``Input type`` and ``Input
    Strides`` are part of the op's row besides ``params`` (TraceLens's ``dtype_*`` and
    ``stride_*`` parameters: the tensors the model reads); ``dtypes`` holds the types at
    ``typed`` (filled by :func:`~aorta.trace.perf.op_model.op_model`).
    """

    family: str
    flops: float
    bytes: float
    unit: str
    dtype: str
    params: dict[str, Any] = field(default_factory=dict)
    typed: tuple[int, ...] = (0,)
    strided: tuple[int, ...] = (0,)
    dtypes: tuple[str, ...] = ()

    @cached_property
    def shape(self) -> str:
        """The parameters as one readable string (``M=141 N=512 K=512 bias=True``)."""
        return " ".join(f"{k}={_fmt(v)}" for k, v in self.params.items())


def _fmt(value: Any) -> str:
    if isinstance(value, tuple | list):
        return "(" + ",".join(str(v) for v in value) + ")"
    return str(value)


_INT = re.compile(r"-?\d+")
_INT_LIST = re.compile(r"[\[\]\d,\s-]*")
_BOOL = re.compile(r"True|False")
Args = tuple[list[Any], list[Any], list[str]]  # dims, types, concrete


def dims_at(dims: list[Any], i: int) -> list[int] | None:
    """``Input Dims[i]`` when it is a tensor shape (a list of ints), else None."""
    shape = dims[i] if 0 <= i < len(dims) else None
    return shape if isinstance(shape, list) and all(isinstance(x, int) for x in shape) else None


def type_at(types: list[Any], i: int) -> str:
    return types[i] if 0 <= i < len(types) and isinstance(types[i], str) else ""


def concrete_at(concrete: list[str], i: int) -> str:
    return concrete[i] if 0 <= i < len(concrete) and isinstance(concrete[i], str) else ""


def ints(text: str) -> list[int] | None:
    """A ``Concrete Inputs`` list string (``'[1, 1]'``) or int (``'1'``) as a list of ints."""
    found = _INT.findall(text)
    return [int(x) for x in found] if found and _INT_LIST.fullmatch(text) else None


def flag(text: str) -> bool | None:
    """A ``Concrete Inputs`` boolean string (``'True'``/``'False'``); ``None`` when absent."""
    return {"True": True, "False": False, "1": True, "0": False}.get(text.strip())


def numel(shape: Sequence[int] | None) -> int:
    return math.prod(shape) if shape is not None else 0


def broadcast(a: Sequence[int], b: Sequence[int]) -> list[int] | None:
    width = max(len(a), len(b))
    a2, b2 = [1] * (width - len(a)) + list(a), [1] * (width - len(b)) + list(b)
    if any(x != y and 1 not in (x, y) for x, y in zip(a2, b2, strict=True)):
        return None
    return [max(x, y) for x, y in zip(a2, b2, strict=True)]


def flags(text: str) -> list[bool]:
    """The booleans of a ``Concrete Inputs`` list string (``'[True, False]'``).

    >>> flags("[True, False, True]")
    [True, False, True]
    """
    return [x == "True" for x in _BOOL.findall(text)]
