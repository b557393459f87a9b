"""The command line: each module is one area of tasks, collected into `ns`."""
from invoke import Collection

from tasks import facts

ns = Collection()
ns.add_task(facts.facts)
