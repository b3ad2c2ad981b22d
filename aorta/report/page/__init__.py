"""``report.html``, the self-contained page of a run or two: ``write`` reads the run and writes
the page; ``findings``, ``sections``, ``failures``, ``details``, ``hardware`` build its sections,
``two_runs`` the page comparing two runs, ``kit`` the markup. Not ``report/html/``: a package of
that name would shadow the function ``aorta.report.html`` once imported.
"""
