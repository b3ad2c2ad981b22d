"""A recipe's cells, expanded: the ``cells`` as written, the cartesian product of an ``axes``
block, or a probe recipe's ``mitigation_axis`` × ``diagnostic_axis`` — each cell with the paths
that locate it in the document, so a problem found in a generated cell names where it came
from. :meth:`~aorta.recipe.model.Recipe.expand_cells` puts them in order.

Examples
--------
>>> axes = Axes.model_validate({"mitigations": ["none", ["tf32_off", "xnack"]],
...                             "workload_config": {"m": [1, 2]}})
>>> [(c.name, c.mitigation_paths) for c in axes_cells(axes)][1:3]
[('none-m_2', ('axes.mitigations[0]',)), ('tf32_off.xnack-m_1', ('axes.mitigations[1]', 'axes.mitigations[1]'))]
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aorta.recipe.blocks import Axes, CellSpec, DockerEnvironment
from aorta.recipe.fields import CELL_NAME_RE
from aorta.recipe.limits import fit_name

__all__ = ["ExpandedCell", "axes_cells", "probe_cells", "written_cells"]


@dataclass(frozen=True)
class ExpandedCell:
    """A cell of the recipe with the paths that locate it in the document (for errors)."""

    spec: CellSpec
    path: str
    mitigation_paths: tuple[str, ...]
    environment_path: str
    #: A generated name over :data:`MAX_NAME_BYTES`, in full (``name`` is then shortened).
    full_name: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name


def written_cells(cells: Sequence[CellSpec]) -> list[ExpandedCell]:
    """The ``cells`` as written, each at ``cells[i]``."""
    out: list[ExpandedCell] = []
    for i, cell in enumerate(cells):
        path = f"cells[{i}]"
        mpaths = tuple(f"{path}.mitigations[{k}]" for k in range(len(cell.mitigations)))
        out.append(ExpandedCell(cell, path, mpaths, f"{path}.environment"))
    return out


def probe_cells(
    mitigation_axis: Sequence[str], diagnostic_axis: Sequence[str] | None
) -> list[ExpandedCell]:
    """A probe recipe's cells, ``<m>-<d>`` for each mitigation × diagnostic (``none`` when
    there is no diagnostic axis).

    >>> [c.name for c in probe_cells(["none", "xnack"], None)]
    ['none-none', 'xnack-none']
    """
    out: list[ExpandedCell] = []
    diag = diagnostic_axis or ["none"]
    for (i, m), (j, d) in itertools.product(enumerate(mitigation_axis), enumerate(diag)):
        name, full = fit_name(f"{m}-{d}")
        spec = CellSpec.model_construct(
            name=name,
            mitigations=[m, d],
            environment="local",
            extra_env={},
            trials=None,
            steps=None,
            workload_config={},
            collect=None,
        )
        dpath = f"diagnostic_axis[{j}]" if diagnostic_axis else "diagnostic_axis"
        out.append(
            ExpandedCell(
                spec,
                f"mitigation_axis[{i}]",
                (f"mitigation_axis[{i}]", dpath),
                "mode",
                full_name=full,
            )
        )
    return out


def _axis_label(value: Any) -> str:
    text = value.name if isinstance(value, DockerEnvironment) else str(value)
    text = re.sub(r"[^A-Za-z0-9_.\-]+", "_", text)
    return text or "_"


def axes_cells(axes: Axes) -> list[ExpandedCell]:
    """The cells of an ``axes`` block: every stack × environment × ``workload_config`` value,
    named from its parts (the axes the block leaves out are not in the name)."""
    stacks = axes.mitigations or [["none"]]
    envs: list[str | DockerEnvironment] = axes.environment or ["local"]
    keys = list(axes.workload_config)
    value_lists = [axes.workload_config[k] for k in keys]
    out = []
    for (si, stack), (ei, env), *picked in itertools.product(
        enumerate(stacks), enumerate(envs), *(list(enumerate(vs)) for vs in value_lists)
    ):
        parts = []
        if axes.mitigations is not None:
            parts.append(".".join(stack))
        if axes.environment is not None:
            parts.append(_axis_label(env))
        config = {}
        for key, (_, value) in zip(keys, picked, strict=True):
            parts.append(f"{_axis_label(key)}_{_axis_label(value)}")
            config[key] = value
        name = "-".join(parts) or "cell"
        if not CELL_NAME_RE.match(name):
            name = "c" + name
        name, full = fit_name(name)
        spec = CellSpec.model_construct(
            name=name,
            mitigations=list(stack),
            environment=env,
            extra_env={},
            trials=None,
            steps=None,
            workload_config=config,
            collect=None,
        )
        mpath = f"axes.mitigations[{si}]" if axes.mitigations is not None else "axes"
        epath = f"axes.environment[{ei}]" if axes.environment is not None else "axes"
        out.append(ExpandedCell(spec, "axes", tuple(mpath for _ in stack), epath, full_name=full))
    return out
