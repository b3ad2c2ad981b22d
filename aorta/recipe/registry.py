"""Mitigations and environments: the names a recipe may use.

A **mitigation** is a named bundle of environment variables (``xnack`` → ``HSA_XNACK=1``). An
**environment** is where a cell runs: ``local`` (this host), a registered docker image, or an
inline ``{docker: ref}``. Both come from three sources, loaded once per run:

1. the built-ins below (the upstream AORTA table plus NVIDIA/NCCL equivalents);
2. installed plugins, through the ``aorta.mitigations`` and ``aorta.environments`` entry-point
   groups (a broken plugin is named in a warning and skipped);
3. sidecar files given with ``--mitigations-file`` (YAML or JSON).

A name defined twice is an error naming both sources.

Examples
--------
>>> reg = Registry.load(entry_points=False)
>>> dict(reg.mitigation("xnack").env)
{'HSA_XNACK': '1'}
>>> reg.environment("local").kind
'local'
"""

from __future__ import annotations

import difflib
import importlib.metadata
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from aorta.envvars import env_problems
from aorta.errors import Problem, RecipeError
from aorta.recipe.blocks import DockerEnvironment
from aorta.recipe.limits import MAX_NAME_BYTES, image_ref_problem
from aorta.recipe.yamldoc import parse_yaml

__all__ = ["Environment", "Mitigation", "Registry"]

MITIGATIONS_GROUP = "aorta.mitigations"
ENVIRONMENTS_GROUP = "aorta.environments"
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


@dataclass(frozen=True)
class Mitigation:
    """A named bundle of environment variables."""

    name: str
    env: Mapping[str, str]
    description: str = ""
    #: ``amd``, ``nvidia``, ``cpu`` or ``any``: which stack reads these variables.
    vendor: str = "any"
    #: Where the definition came from: ``builtin``, ``entry point <name>`` or a file path.
    source: str = "builtin"

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))


@dataclass(frozen=True)
class Environment:
    """Where a cell runs. ``local`` runs on this host; ``docker`` wraps trials in ``docker run``."""

    name: str
    kind: Literal["local", "docker"] = "local"
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    description: str = ""
    source: str = "builtin"

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "image": self.image,
            "env": dict(self.env),
            "source": self.source,
        }


def _m(name: str, env: dict[str, str], description: str, vendor: str = "amd") -> Mitigation:
    return Mitigation(name, env, description, vendor)


BUILTIN_MITIGATIONS: tuple[Mitigation, ...] = (
    _m("none", {}, "the explicit baseline: no variables", "any"),
    # --- upstream AORTA (ROCm) ---
    _m("tf32_off", {"DISABLE_TF32": "1"}, "hipBLASLt: no TF32 math"),
    _m("xnack", {"HSA_XNACK": "1"}, "enable XNACK (page-fault retry)"),
    _m("gpu_max_hw_queues_2", {"GPU_MAX_HW_QUEUES": "2"}, "HIP: at most 2 hardware queues"),
    _m(
        "debug_hip_dynamic_queues_1", {"DEBUG_HIP_DYNAMIC_QUEUES": "1"}, "HIP dynamic queues mode 1"
    ),
    _m(
        "debug_hip_dynamic_queues_2", {"DEBUG_HIP_DYNAMIC_QUEUES": "2"}, "HIP dynamic queues mode 2"
    ),
    _m("roc_aql_queue_size_1024", {"ROC_AQL_QUEUE_SIZE": "1024"}, "smaller AQL queues"),
    _m("hsa_no_sdma", {"HSA_ENABLE_SDMA": "0"}, "copies by blit kernels instead of SDMA engines"),
    _m("hsa_no_scratch_reclaim", {"HSA_NO_SCRATCH_RECLAIM": "1"}, "keep scratch memory"),
    _m("hsa_disable_cache", {"HSA_DISABLE_CACHE": "1"}, "disable the HSA code-object cache"),
    _m("hsa_enable_cache", {"HSA_DISABLE_CACHE": "0"}, "enable the HSA code-object cache"),
    _m("roc_signal_pool_16k", {"ROC_SIGNAL_POOL_SIZE": "16384"}, "larger signal pool"),
    _m("gpu_force_blit_copy_128", {"GPU_FORCE_BLIT_COPY_SIZE": "128"}, "blit copies up to 128 KB"),
    _m(
        "debug_clr_no_batch_cpu_sync",
        {"DEBUG_CLR_BATCH_CPU_SYNC_SIZE": "0"},
        "CLR: no batched CPU sync",
    ),
    _m(
        "nccl_launch_order_implicit",
        {"NCCL_LAUNCH_ORDER_IMPLICIT": "1"},
        "RCCL/NCCL implicit launch order",
        "any",
    ),
    _m(
        "rccl_gfx942_cheap_fence_off",
        {"RCCL_GFX9_CHEAP_FENCE_OFF": "1", "RCCL_GFX942_CHEAP_FENCE_OFF": "1"},
        "RCCL: full fences on gfx9/gfx942",
    ),
    _m(
        "pytorch_no_cuda_memory_caching",
        {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
        "PyTorch: no caching allocator",
        "any",
    ),
    _m(
        "pytorch_alloc_expandable_segments",
        {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        "PyTorch: expandable allocator segments",
        "any",
    ),
    _m("hip_launch_blocking", {"HIP_LAUNCH_BLOCKING": "1"}, "synchronous HIP kernel launches"),
    _m("amd_log_level_4", {"AMD_LOG_LEVEL": "4"}, "verbose HIP runtime logging"),
    _m(
        "fa_prefer_ck",
        {"TORCH_ROCM_FA_PREFER_CK": "1"},
        "flash attention: prefer Composable Kernel",
    ),
    _m("fa_prefer_aotriton", {"TORCH_ROCM_FA_PREFER_CK": "0"}, "flash attention: prefer AOTriton"),
    # --- NVIDIA / NCCL / PyTorch equivalents ---
    _m(
        "cuda_launch_blocking",
        {"CUDA_LAUNCH_BLOCKING": "1"},
        "synchronous CUDA kernel launches",
        "nvidia",
    ),
    _m("nvidia_tf32_off", {"NVIDIA_TF32_OVERRIDE": "0"}, "CUDA libraries: no TF32 math", "nvidia"),
    _m(
        "torch_tf32_cublas_override_off",
        {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "0"},
        "PyTorch: no TF32 cuBLAS override",
        "nvidia",
    ),
    _m("nccl_algo_ring", {"NCCL_ALGO": "Ring"}, "NCCL/RCCL: ring algorithm only", "any"),
    _m("nccl_algo_tree", {"NCCL_ALGO": "Tree"}, "NCCL/RCCL: tree algorithm only", "any"),
    _m("nccl_proto_simple", {"NCCL_PROTO": "Simple"}, "NCCL/RCCL: Simple protocol", "any"),
    _m("nccl_proto_ll", {"NCCL_PROTO": "LL"}, "NCCL/RCCL: LL protocol", "any"),
    _m("nccl_proto_ll128", {"NCCL_PROTO": "LL128"}, "NCCL/RCCL: LL128 protocol", "any"),
    _m(
        "nccl_p2p_disable", {"NCCL_P2P_DISABLE": "1"}, "NCCL/RCCL: no peer-to-peer transport", "any"
    ),
    _m("nccl_ib_disable", {"NCCL_IB_DISABLE": "1"}, "NCCL/RCCL: no InfiniBand/RoCE", "any"),
    _m("nccl_debug_info", {"NCCL_DEBUG": "INFO"}, "NCCL/RCCL: INFO logging", "any"),
    _m(
        "torch_nccl_blocking_wait",
        {"TORCH_NCCL_BLOCKING_WAIT": "1"},
        "PyTorch: blocking collective waits",
        "any",
    ),
    _m(
        "torch_nccl_async_error_handling",
        {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"},
        "PyTorch: async NCCL error handling",
        "any",
    ),
    # --- CPU knobs (read at interpreter/library start: use trial_isolation: process) ---
    _m("omp_num_threads_1", {"OMP_NUM_THREADS": "1"}, "one OpenMP thread", "cpu"),
    _m(
        "aten_cpu_capability_default",
        {"ATEN_CPU_CAPABILITY": "default"},
        "PyTorch CPU kernels without AVX2/AVX-512",
        "cpu",
    ),
)

BUILTIN_ENVIRONMENTS: tuple[Environment, ...] = (
    Environment("local", "local", None, {}, "this host, as it is"),
)


# --------------------------------------------------------------------------------------------


def _name_problem(name: Any, what: str) -> str | None:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        return f"not a valid {what} name"
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        # environments name folders of the run directory
        return f"not a valid {what} name: it is {size} bytes long, at most {MAX_NAME_BYTES} bytes"
    return None


def _refuse_bad_name(name: Any, what: str, where: str) -> None:
    if problem := _name_problem(name, what):
        raise RecipeError([Problem(where, problem)])


def _refuse_unknown_keys(spec: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    if extra := set(spec) - set(allowed):
        message = f"unknown key(s) {sorted(extra)} (allowed: {', '.join(allowed)})"
        raise RecipeError([Problem(where, message)])


def _provided(obj: Any, kind: type) -> Any:
    """What a plugin or sidecar provides: what a callable returns; one object as a list of it."""
    if callable(obj) and not isinstance(obj, Mapping):
        obj = obj()
    return [obj] if isinstance(obj, kind) else obj


def _check_env_mapping(env: Any, where: str) -> dict[str, str]:
    if not isinstance(env, Mapping):
        raise RecipeError([Problem(where, "env must be a mapping of NAME: 'value'")])
    problems = env_problems(env)
    if problems:
        raise RecipeError([Problem(f"{where}.{name}", message) for name, message in problems])
    return dict(env)


def _mitigations_from(obj: Any, source: str) -> list[Mitigation]:
    """Accept what a plugin or sidecar provides: Mitigation objects, or name → env / spec."""
    obj = _provided(obj, Mitigation)
    out = []
    if isinstance(obj, Mapping):
        for name, spec in obj.items():
            where = f"{source}: mitigations.{name}"
            _refuse_bad_name(name, "mitigation", where)
            if isinstance(spec, Mapping) and "env" in spec:
                _refuse_unknown_keys(spec, ("env", "description", "vendor"), where)
                env = _check_env_mapping(spec["env"], f"{where}.env")
                out.append(
                    Mitigation(
                        name,
                        env,
                        str(spec.get("description", "")),
                        str(spec.get("vendor", "any")),
                        source,
                    )
                )
            else:
                out.append(
                    Mitigation(name, _check_env_mapping(spec or {}, where), "", "any", source)
                )
    elif isinstance(obj, Iterable) and not isinstance(obj, str | bytes):
        for item in obj:
            if not isinstance(item, Mitigation):
                raise RecipeError(
                    [Problem(source, f"expected Mitigation objects, got {type(item).__name__}")]
                )
            out.append(Mitigation(item.name, item.env, item.description, item.vendor, source))
    else:
        raise RecipeError([Problem(source, "mitigations must be a mapping of name → env vars")])
    return out


def _environments_from(obj: Any, source: str) -> list[Environment]:
    obj = _provided(obj, Environment)
    out = []
    if isinstance(obj, Mapping):
        for name, spec in obj.items():
            where = f"{source}: environments.{name}"
            _refuse_bad_name(name, "environment", where)
            if not isinstance(spec, Mapping):
                raise RecipeError([Problem(where, "must be a mapping with 'docker' and/or 'env'")])
            _refuse_unknown_keys(spec, ("docker", "env", "description"), where)
            image = spec.get("docker")
            if image is not None:
                problem = image_ref_problem(image)
                if problem:
                    raise RecipeError([Problem(f"{where}.docker", f"{problem}, got {image!r}")])
            env = _check_env_mapping(spec.get("env") or {}, f"{where}.env")
            out.append(
                Environment(
                    name,
                    "docker" if image else "local",
                    image,
                    env,
                    str(spec.get("description", "")),
                    source,
                )
            )
    elif isinstance(obj, Iterable) and not isinstance(obj, str | bytes):
        for item in obj:
            if not isinstance(item, Environment):
                raise RecipeError(
                    [Problem(source, f"expected Environment objects, got {type(item).__name__}")]
                )
            _refuse_bad_name(item.name, "environment", f"{source}: environments.{item.name}")
            if item.kind == "docker":
                problem = image_ref_problem(item.image or "")  # a docker one without an image
                if problem:
                    raise RecipeError(
                        [
                            Problem(
                                f"{source}: environments.{item.name}.docker",
                                f"{problem}, got {item.image!r}",
                            )
                        ]
                    )
            out.append(
                Environment(item.name, item.kind, item.image, item.env, item.description, source)
            )
    else:
        raise RecipeError([Problem(source, "environments must be a mapping of name → spec")])
    return out


def _entry_points(group: str) -> list[importlib.metadata.EntryPoint]:
    return sorted(importlib.metadata.entry_points(group=group), key=lambda ep: ep.name)


def _load_plugins(group: str, convert: Callable[[Any, str], list[Any]]) -> list[Any]:
    found = []
    for ep in _entry_points(group):
        source = f"entry point {ep.name!r} ({ep.value})"
        try:
            found.extend(convert(ep.load(), source))
        except Exception as exc:  # a broken plugin must not take the whole tool down
            warnings.warn(f"skipping {group} plugin {source}: {exc}", RuntimeWarning, stacklevel=3)
    return found


def _read_sidecar(path: Path) -> tuple[list[Mitigation], list[Environment]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeError(
            [Problem("", f"cannot read mitigations file: {exc}")], source=str(path)
        ) from None
    try:
        data = parse_yaml(text)
    except RecipeError as exc:
        raise exc.with_source(str(path)) from None
    if data is None:
        return [], []
    if not isinstance(data, Mapping):
        raise RecipeError([Problem("", "a mitigations file is a mapping")], source=str(path))
    if not set(data) & {"mitigations", "environments"}:
        # The short form: the whole file is name → env.
        data = {"mitigations": data}
    extra = set(data) - {"mitigations", "environments"}
    if extra:
        raise RecipeError(
            [Problem(str(sorted(extra)[0]), "unknown key (allowed: mitigations, environments)")],
            source=str(path),
        )
    src = str(path)
    return (
        _mitigations_from(data.get("mitigations") or {}, src),
        _environments_from(data.get("environments") or {}, src),
    )


class Registry:
    """The mitigations and environments available to one run.

    Build it once with :meth:`load` and pass it around; lookups never reload plugins or files.
    """

    def __init__(
        self,
        mitigations: Iterable[Mitigation] = (),
        environments: Iterable[Environment] | None = None,
    ) -> None:
        # `local` (this host) is always there unless the caller lists environments itself.
        if environments is None:
            environments = BUILTIN_ENVIRONMENTS
        self._mitigations: dict[str, Mitigation] = {}
        self._environments: dict[str, Environment] = {}
        for m in mitigations:
            self._add(self._mitigations, m, "mitigation")
        for e in environments:
            self._add(self._environments, e, "environment")

    @staticmethod
    def _add(table: dict[str, Any], item: Any, what: str) -> None:
        prior = table.get(item.name)
        if prior is not None:
            raise RecipeError(
                [
                    Problem(
                        "",
                        f"{what} {item.name!r} is defined twice: by {prior.source} and by {item.source}",
                    )
                ]
            )
        table[item.name] = item

    @classmethod
    def load(
        cls,
        *,
        files: Iterable[str | Path] = (),
        entry_points: bool = True,
    ) -> Registry:
        """Built-ins, then installed plugins (when ``entry_points``), then sidecar ``files``.

        Raises :class:`~aorta.errors.RecipeError` when a name is defined twice or a file is
        malformed.
        """
        mitigations = list(BUILTIN_MITIGATIONS)
        environments = list(BUILTIN_ENVIRONMENTS)
        if entry_points:
            mitigations += _load_plugins(MITIGATIONS_GROUP, _mitigations_from)
            environments += _load_plugins(ENVIRONMENTS_GROUP, _environments_from)
        for f in files:
            m, e = _read_sidecar(Path(f))
            mitigations += m
            environments += e
        return cls(mitigations, environments)

    @property
    def mitigations(self) -> Mapping[str, Mitigation]:
        return MappingProxyType(self._mitigations)

    @property
    def environments(self) -> Mapping[str, Environment]:
        return MappingProxyType(self._environments)

    def mitigation(self, name: str, *, path: str = "") -> Mitigation:
        """The mitigation called ``name``; an unknown name lists the close and available ones."""
        try:
            return self._mitigations[name]
        except KeyError:
            raise RecipeError(
                [Problem(path, self._unknown("mitigation", name, self._mitigations))]
            ) from None

    def environment(self, ref: str | DockerEnvironment, *, path: str = "") -> Environment:
        """The environment for a recipe reference: a registered name or an inline docker ref."""
        if isinstance(ref, DockerEnvironment):
            return Environment(ref.name, "docker", ref.docker, {}, "inline", "recipe")
        try:
            return self._environments[ref]
        except KeyError:
            raise RecipeError(
                [Problem(path, self._unknown("environment", ref, self._environments))]
            ) from None

    @staticmethod
    def _unknown(what: str, name: str, table: Mapping[str, Any]) -> str:
        close = difflib.get_close_matches(name, list(table), n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        return f"unknown {what} {name!r}{hint} (available: {', '.join(sorted(table))})"
