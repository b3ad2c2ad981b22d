"""Objects that tests register as entry points (a real import path, loaded by importlib)."""

MITIGATIONS = {"site_fix": {"env": {"SITE_FLAG": "1"}, "description": "a site-specific fix"}}
