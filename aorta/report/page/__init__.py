"""``report.html``, the self-contained page of a run or of two runs compared.

:mod:`~aorta.report.page.write` reads the run and writes the page (``aorta.report.html``,
``aorta.report.compare_html``); the sections are pure functions of its data
(:mod:`~aorta.report.page.findings`, :mod:`~aorta.report.page.sections`,
:mod:`~aorta.report.page.failures`, :mod:`~aorta.report.page.details`,
:mod:`~aorta.report.page.hardware`), the comparison page is :mod:`~aorta.report.page.two_runs`
and the markup :mod:`~aorta.report.page.kit`. Not ``report/html/``: a sub-package of that name
would shadow the function ``aorta.report.html`` once imported.
"""
