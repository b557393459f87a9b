"""The command line: each module is one area of tasks, collected into `ns`."""
from invoke import Collection

from specfleet.tasks import bench, bundle, collect, facts, provision, report
from specfleet.tasks import testbed as testbed_tasks
from specfleet.tasks.common import guarded

ns = Collection()
for t in (facts.facts, provision.provision, provision.stage_model, bench.bench, bench.status, bench.stop,
          collect.collect, report.report, bundle.bundle):
    ns.add_task(t)
ns.add_collection(testbed_tasks.ns)

# Long options only: invoke's automatic short flags gave one letter different
# meanings in different tasks (-f was --forks here and --force there).
for _name in ns.task_names:
    ns[_name].auto_shortflags = False
    guarded(ns[_name])  # bad input: one line, exit 1 (tasks/common.py)
