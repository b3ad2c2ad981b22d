from aorta.cli import entry

entry()
