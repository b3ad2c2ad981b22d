"""Built-in workloads: ``command`` (probe mode), ``matmul``, ``race`` and ``training``.

Each registers through the ``aorta.workloads`` entry-point group in ``pyproject.toml``.
"""
