"""Every rendering of results: matrix.md/json, report files, terminal text, progress."""
