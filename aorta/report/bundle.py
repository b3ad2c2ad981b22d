"""The ``aorta bundle --review`` listing: what a bundle would hold, before it is written."""

from __future__ import annotations

from pathlib import Path

from aorta.store.bundle import BundlePlan

__all__ = ["format_review", "size_text"]


def size_text(n: int) -> str:
    """Bytes for people (binary units).

    >>> size_text(512), size_text(2048), size_text(5 * 1024**3)
    ('512 B', '2.0 KiB', '5.0 GiB')
    """
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_review(plan: BundlePlan, *, output: str | Path = ".") -> str:
    """The files that would go in (size, redaction count or note), then what would be left
    out and why, then the totals and where the archive would be written."""
    included = plan.included
    width = max((len(e.path) for e in plan.entries), default=4)
    lines = [f"Bundle {Path(output) / plan.file_name} (review: nothing is written)", ""]
    lines.append(f"{'file'.ljust(width)}  {'size':>10}  redactions")
    for e in included:
        count = "-" if e.redactions is None else str(e.redactions)
        note = f"  ({e.note})" if e.note else ""
        lines.append(f"{e.path.ljust(width)}  {size_text(e.size):>10}  {count}{note}")
    if plan.left_out:
        lines += ["", "Left out:"]
        lines += [
            f"{e.path.ljust(width)}  {size_text(e.size):>10}  {e.note}" for e in plan.left_out
        ]
    total = sum(e.size for e in included)
    r = plan.redactor
    lines += [
        "",
        f"{len(included)} files, {size_text(total)} before compression, {plan.redactions} "
        f"redactions; {len(plan.left_out)} left out. Cap on logs/traces/artifacts: "
        f"{size_text(plan.max_size)}.",
        f"Redaction: secret names and shapes, {r.n_known} secret forms known to the run, "
        f"scrub_env_keys {list(r.scrub_keys)}, scrub_paths {r.scrub_paths}, "
        f"scrub_ip_addresses {r.scrub_ips}.",
    ]
    return "\n".join(lines)
