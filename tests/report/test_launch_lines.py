"""What ``aorta launch`` prints of its nodes (#45.4, #45.7): the node's paths as the login node
has them once gathered, and a dry-run's remote line short enough to read."""

from __future__ import annotations

import posixpath

from hypothesis import given
from hypothesis import strategies as st

from aorta.launch.node_command import node_dir
from aorta.recipe.cluster import Node
from aorta.report.launch_text import on_login_node, shorten


def test_a_nodes_run_dir_is_printed_under_the_login_nodes_output() -> None:
    for workdir in (".", "/scratch/u", "~/w"):
        node = Node(rank=1, address="10.0.0.2", workdir=workdir)
        out = posixpath.join(node_dir(node, "20261206T1200-ab12"), "out")
        line = f"Run dir: {out}/T-1/matmul/2026-12-06T12-00-00 — resume with: aorta sweep resume {out}/T-1/matmul/2026-12-06T12-00-00"
        shown = on_login_node(line, "runs/")
        assert ".aorta-launch" not in shown
        assert shown.endswith("aorta sweep resume runs/T-1/matmul/2026-12-06T12-00-00")
        assert shown.startswith("Run dir: runs/T-1/matmul/")
    # Lines without a node path are kept as they are.
    assert on_login_node("step 3: 12.5 ms", "runs") == "step 3: 12.5 ms"


@given(st.text(max_size=3000), st.integers(min_value=20, max_value=400))
def test_shorten_keeps_short_lines_and_bounds_long_ones(line: str, most: int) -> None:
    out = shorten(line, most=most)
    if len(line) <= most:
        assert out == line
    else:
        assert len(out) < most + 40
        assert out.startswith(line[: most * 2 // 3]) and out.endswith(line[-(most // 3) :])
        assert f"(+{len(line) - most * 2 // 3 - most // 3} characters)" in out
