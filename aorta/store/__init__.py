"""The only code that names files: the run directory (manifest, lock, atomic writes, trial
and trace paths), trial records and their status vocabulary, host/environment snapshots.
"""
