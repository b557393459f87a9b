"""The command line: each module is one area of tasks, collected into `ns`."""
from invoke import Collection

from tasks import facts, provision

ns = Collection()
ns.add_task(facts.facts)
ns.add_task(provision.provision)
ns.add_task(provision.stage_model)
