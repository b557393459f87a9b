"""The command line: each module is one area of tasks, collected into `ns`."""
from invoke import Collection

ns = Collection()
