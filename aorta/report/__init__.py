"""Every rendering of results: matrix.md/json, report files, HTML pages, terminal text, progress.

``aorta.report.html(run)`` writes a run's self-contained ``report.html`` and
``aorta.report.compare_html(run_a, run_b)`` the page comparing two runs
(:mod:`aorta.report.page.write`); ``aorta.report.explain_text(run, cell)`` the text of
``aorta compare RUN --explain CELL`` (:mod:`aorta.report.explain`);
``aorta.report.run_findings(ds)`` the findings of a run (:mod:`aorta.report.findings`: failures
and hangs first, then timing — what every page lists); ``aorta.report.dry_run_lines(result)``
the table of ``aorta launch --dry-run`` (:mod:`aorta.report.launch_text`); and the words the
CLI prints: plans and summaries (:mod:`~aorta.report.console`), comparison tables
(:mod:`~aorta.report.comparison`), the report folder (:func:`write_report`), a bundle's review
(:func:`format_review`). They load on first use, so
importing this package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aorta.lazy import lazy_names

__all__ = [
    "COMMAND_PENDING",
    "compare_html",
    "compare_paths",
    "comparison_findings",
    "comparison_json",
    "comparison_table",
    "dry_run_lines",
    "explain_text",
    "finding_json",
    "findings_lines",
    "format_plan",
    "format_review",
    "format_summary",
    "history_text",
    "html",
    "on_login_node",
    "plan_to_dict",
    "run_findings",
    "statistics_line",
    "summary_to_dict",
    "write_history_html",
    "write_report",
]

_LAZY = {
    "run_findings": "aorta.report.findings",
    "finding_json": "aorta.report.findings",
    "findings_lines": "aorta.report.findings",
    "comparison_findings": "aorta.report.findings",
    "html": "aorta.report.page.write",
    "compare_html": "aorta.report.page.write",
    "explain_text": "aorta.report.explain",
    "dry_run_lines": "aorta.report.launch_text",
    "on_login_node": "aorta.report.launch_text",
    "COMMAND_PENDING": "aorta.report.console",
    "format_plan": "aorta.report.console",
    "format_summary": "aorta.report.console",
    "plan_to_dict": "aorta.report.console",
    "summary_to_dict": "aorta.report.console",
    "compare_paths": "aorta.report.comparison",
    "comparison_json": "aorta.report.comparison",
    "comparison_table": "aorta.report.comparison",
    "statistics_line": "aorta.report.comparison",
    "write_report": "aorta.report.report_dir",
    "format_review": "aorta.report.bundle",
    "write_history_html": "aorta.report.page.history",
    "history_text": "aorta.report.history",
}

if TYPE_CHECKING:  # the same names for type checkers; loaded on first access at run time
    from aorta.report.bundle import format_review
    from aorta.report.comparison import (
        compare_paths,
        comparison_json,
        comparison_table,
        statistics_line,
    )
    from aorta.report.console import (
        COMMAND_PENDING,
        format_plan,
        format_summary,
        plan_to_dict,
        summary_to_dict,
    )
    from aorta.report.explain import explain_text
    from aorta.report.findings import (
        comparison_findings,
        finding_json,
        findings_lines,
        run_findings,
    )
    from aorta.report.history import history_text
    from aorta.report.launch_text import dry_run_lines, on_login_node
    from aorta.report.page.history import write_history_html
    from aorta.report.page.write import compare_html, html
    from aorta.report.report_dir import write_report


__getattr__, __dir__ = lazy_names(globals(), _LAZY)
