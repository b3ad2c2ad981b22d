"""Rules tables that classify event names, CUDA and ROCm alike.

A :class:`Rules` holds four ordered tables of :class:`Rule` (first match wins):

- ``gpu``: GPU ops → ``compute`` / ``communication`` / ``memcpy`` / ``memset``;
- ``gemm``: kernels → a GEMM family (``tensile``, ``hipblaslt``, ``ck``, ``nvjet``, ``cutlass``,
  ``xmma``, ``maxwell``/``volta``/``turing``/``ampere``/``hopper``, ``triton``, ``gemm``) or
  none;
- ``runtime``: host runtime/driver calls → ``launch`` / ``memcpy`` / ``memset`` / ``sync`` /
  ``other`` (``hipMemcpyAsync`` is a copy, not communication);
- ``host``: host ops (``cpu_op``/``user_annotation``) → ``compute`` / ``communication`` /
  ``other``, for the host-side breakdown of traces without GPU events (gloo's work is
  ``communication``, ATen ops are ``compute``, wrappers and collective calls are ``other``).

Rules are data passed in (:func:`default_rules`, extended with :meth:`Rules.extend`), never
module globals to patch; they are applied once per unique name, never per row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal

import numpy as np

from aorta.regex import Regex, RegexError, compile_regex

__all__ = ["GPU_CLASSES", "HOST_CLASSES", "Rule", "Rules", "default_rules"]

#: The classes of GPU ops, in the order tables list them.
GPU_CLASSES: tuple[str, ...] = ("compute", "communication", "memcpy", "memset")
#: The classes of host ops in the host-side breakdown.
HOST_CLASSES: tuple[str, ...] = ("compute", "communication", "other")

#: Event categories of GPU ops and of host runtime calls in Kineto traces (also for HIP).
GPU_CATS: frozenset[str] = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
RUNTIME_CATS: frozenset[str] = frozenset({"cuda_runtime", "cuda_driver"})


@dataclass(frozen=True)
class Rule:
    r"""One row of a rules table: events whose name matches ``pattern`` get ``label``.

    Parameters
    ----------
    pattern
        A regular expression searched in the event name, in RE2 syntax
        (:func:`aorta.regex.compile_regex`: linear time whatever the pattern; no
        backreferences, no lookaround).
    label
        The class (or family) given to matching events.
    cats
        Restrict the rule to these event categories (``cat``); empty means any.

    Raises
    ------
    aorta.regex.RegexError
        ``pattern`` is not one RE2 takes; the message names the rule and why.

    Examples
    --------
    >>> Rule(r"^my_allreduce", "communication").matches("my_allreduce_kernel", "kernel")
    True
    >>> Rule("Memcpy", "memcpy", cats=("gpu_memcpy",)).matches("Memcpy DtoD", "kernel")
    False
    >>> Rule(r"(nccl)_\1", "communication")
    Traceback (most recent call last):
    ...
    aorta.regex.RegexError: rule 'communication' (pattern '(nccl)_\\1'): backreferences (\1, (?P=name)) are not supported: aorta matches with RE2, which runs in linear time and has none
    """

    pattern: str
    label: str
    cats: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self._regex  # noqa: B018 - compile now: a bad pattern fails where the rule is made

    @cached_property
    def _regex(self) -> Regex:
        try:
            return compile_regex(self.pattern, text="str", capture=False)
        except RegexError as exc:
            raise RegexError(f"rule {self.label!r} (pattern {self.pattern!r}): {exc}") from None

    def matches(self, name: str, cat: str) -> bool:
        """Whether this rule applies to an event named ``name`` of category ``cat``."""
        return (not self.cats or cat in self.cats) and self._regex.search(name) is not None


def _first(rules: Sequence[Rule], name: str, cat: str, default: str | None) -> str | None:
    for rule in rules:
        if rule.matches(name, cat):
            return rule.label
    return default


@dataclass(frozen=True)
class Rules:
    """The four classification tables; see the module docstring.

    Parameters
    ----------
    gpu, gemm, runtime, host
        Ordered rules; the first match wins. GPU ops no ``gpu`` rule matches are ``compute``,
        kernels no ``gemm`` rule matches have no family, runtime calls and host ops no rule
        matches are ``other``.

    Examples
    --------
    >>> rules = default_rules()
    >>> rules.gpu_class("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "kernel")
    'communication'
    >>> rules.gpu_class("__amd_rocclr_copyBuffer", "kernel")
    'memcpy'
    >>> rules.gemm_family("Cijk_Ailk_Bljk_BBS_BH_MT32x32x64_MI16x16x16x1_SN_1LDSB0", "kernel")
    'tensile'
    >>> rules.runtime_kind("hipMemcpyAsync", "cuda_runtime")
    'memcpy'
    >>> rules.host_class("gloo:all_reduce", "user_annotation"), rules.host_class("aten::addmm", "cpu_op")
    ('communication', 'compute')
    >>> rules.host_class("c10d::allreduce_", "cpu_op"), rules.host_class("autograd::engine::evaluate_function: MmBackward0", "cpu_op")
    ('other', 'other')
    >>> mine = rules.extend(gpu=[Rule(r"^my_allreduce", "communication")])
    >>> mine.gpu_class("my_allreduce_bf16", "kernel")
    'communication'
    """

    gpu: tuple[Rule, ...] = ()
    gemm: tuple[Rule, ...] = ()
    runtime: tuple[Rule, ...] = ()
    host: tuple[Rule, ...] = ()
    _cache: dict[tuple[str, str, str], str | None] = field(
        default_factory=dict, compare=False, repr=False
    )

    def extend(
        self,
        *,
        gpu: Iterable[Rule] = (),
        gemm: Iterable[Rule] = (),
        runtime: Iterable[Rule] = (),
        host: Iterable[Rule] = (),
        where: Literal["first", "last"] = "first",
    ) -> Rules:
        """A copy with extra rules, checked before (``where="first"``) or after the existing ones."""

        def merge(old: tuple[Rule, ...], new: Iterable[Rule]) -> tuple[Rule, ...]:
            new = tuple(new)
            return new + old if where == "first" else old + new

        return replace(
            self,
            gpu=merge(self.gpu, gpu),
            gemm=merge(self.gemm, gemm),
            runtime=merge(self.runtime, runtime),
            host=merge(self.host, host),
            _cache={},
        )

    def _lookup(self, table: str, name: str, cat: str, default: str | None) -> str | None:
        key = (table, name, cat)
        if key not in self._cache:
            self._cache[key] = _first(getattr(self, table), name, cat, default)
        return self._cache[key]

    def gpu_class(self, name: str, cat: str) -> str:
        """``compute``, ``communication``, ``memcpy`` or ``memset`` for a GPU op."""
        return self._lookup("gpu", name, cat, "compute") or "compute"

    def gemm_family(self, name: str, cat: str = "kernel") -> str | None:
        """The GEMM family of a kernel, or ``None``."""
        return self._lookup("gemm", name, cat, None)

    def runtime_kind(self, name: str, cat: str = "cuda_runtime") -> str:
        """``launch``, ``memcpy``, ``memset``, ``sync`` or ``other`` for a runtime call."""
        return self._lookup("runtime", name, cat, "other") or "other"

    def host_class(self, name: str, cat: str = "cpu_op") -> str:
        """``compute``, ``communication`` or ``other`` for a host op (host-side breakdown)."""
        return self._lookup("host", name, cat, "other") or "other"

    def codes(
        self,
        table: Literal["gpu", "gemm", "runtime", "host"],
        names: Sequence[str],
        cats: Sequence[str],
        labels: Sequence[str],
    ) -> np.ndarray:
        """For parallel unique ``names``/``cats``: the index of each one's label in ``labels``.

        Unmatched names get the table's default (``-1`` for none). This is the vectorised entry
        point: call it with the unique (name, cat) pairs, then index the result with row codes.
        """
        tables: dict[str, Callable[[str, str], str | None]] = {
            "gpu": self.gpu_class,
            "gemm": self.gemm_family,
            "runtime": self.runtime_kind,
            "host": self.host_class,
        }
        lookup = tables[table]
        position: dict[str | None, int] = {label: i for i, label in enumerate(labels)}
        return np.array(
            [position.get(lookup(n, c), -1) for n, c in zip(names, cats, strict=True)],
            dtype=np.int16,
        )


_KERNEL = ("kernel",)
_CUBLAS_ARCHS = ("maxwell", "volta", "turing", "ampere", "hopper")
_HOST_OPS = ("user_annotation", "cpu_op")


def default_rules() -> Rules:
    """The built-in CUDA + ROCm rules.

    Communication: NCCL/RCCL/MSCCL kernels (``ncclDevKernel_Generic``, ``ncclKernel_*``,
    ``rcclGenericKernel``, ...). Copies and fills: Kineto's ``gpu_memcpy``/``gpu_memset`` events
    and ROCm's rocclr blit kernels (``__amd_rocclr_copyBuffer``, ``__amd_rocclr_fillBuffer``).
    GEMM families: Tensile ``Cijk_`` (rocBLAS), hipBLASLt (``Cijk_..._UserArgs``), Composable
    Kernel, nvjet, CUTLASS, cuBLAS ``sm80/sm90_xmma``, cuBLAS ``<arch>_*gemm`` (family
    ``volta``, ``ampere``, ...: the architecture in the kernel's name, not the device's), Triton
    matmul templates, then any other ``gemm`` kernel. Host ops: the work of a host collective
    backend (``gloo:all_reduce``, ``mpi:``/``ucc:`` alike) is communication; collective calls
    (``c10d::*``, ``_c10d_functional::*``, ``record_param_comms``, ``nccl:*``) and wrappers
    (``autograd::*``, ``torch::autograd::*``, ``profiler::*``) are other; every other namespaced
    ``cpu_op`` (``aten::mm``, ``mylib::op``) is compute.

    Examples
    --------
    >>> default_rules().gemm_family("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT")
    'nvjet'
    """
    gpu = (
        Rule(".", "memcpy", cats=("gpu_memcpy",)),
        Rule(".", "memset", cats=("gpu_memset",)),
        Rule(r"(?i)nccl|rccl|msccl|cross_device_reduce", "communication", cats=_KERNEL),
        Rule(r"__amd_rocclr_(copy|copyBuffer|copyImage)", "memcpy", cats=_KERNEL),
        Rule(r"__amd_rocclr_fill", "memset", cats=_KERNEL),
    )
    gemm = (
        Rule(r"^(Custom_)?Cijk_.*UserArgs", "hipblaslt", cats=_KERNEL),
        Rule(r"^(Custom_)?Cijk_", "tensile", cats=_KERNEL),
        Rule(r"(?i)(\bck(_tile)?::|_ZN2ck|_ZN7ck_tile).*gemm", "ck", cats=_KERNEL),
        Rule(r"^nvjet_", "nvjet", cats=_KERNEL),
        Rule(r"(?i)cutlass", "cutlass", cats=_KERNEL),
        Rule(r"sm\d+_xmma_gemm|xmma_gemm", "xmma", cats=_KERNEL),
        # cuBLAS's pre-nvjet kernels are named after the architecture they were written for
        # (``volta_sgemm_*`` runs on an A100 too): the family is that name, not the device
        *(Rule(rf"{arch}_\w*gemm", arch, cats=_KERNEL) for arch in _CUBLAS_ARCHS),
        Rule(r"^triton_\w*(mm|gemm|matmul)|^triton_tem_", "triton", cats=_KERNEL),
        # fbgemm is a library, not a GEMM: "gemm" not after "fb" (RE2 has no lookbehind)
        Rule(r"(?i)(?:^.?|[^f].|.[^b])gemm|gemv", "gemm", cats=_KERNEL),
    )
    runtime = (
        Rule(
            r"(?i)^(cuda|hip|cu)(Ext)?(Module)?Launch(Cooperative)?Kernel|^(cuda|hip|cu)GraphLaunch|^cuLaunchKernelEx|LaunchKernelExC",
            "launch",
        ),
        Rule(r"^(cuda|hip|cu)Memcpy", "memcpy"),
        Rule(r"^(cuda|hip|cu)Memset", "memset"),
        Rule(r"Synchronize|StreamWaitEvent|EventQuery|StreamQuery|^cuStreamWaitValue", "sync"),
    )
    host = (
        Rule(r"^(gloo|mpi|ucc):", "communication", cats=_HOST_OPS),
        Rule(
            r"^(c10d|_c10d_functional|c10d_functional|autograd|torch::autograd|profiler)::"
            r"|^record_param_comms$|^nccl:",
            "other",
        ),
        Rule(r"^\w+::", "compute", cats=("cpu_op",)),
    )
    return Rules(gpu=gpu, gemm=gemm, runtime=runtime, host=host)
