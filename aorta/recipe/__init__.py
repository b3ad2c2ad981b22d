"""What to run, pure: the recipe schema, YAML with located errors, the mitigation and
environment registry, and the plan (cells × trials). Reads files; writes none.
"""
