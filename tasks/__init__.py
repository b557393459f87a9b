"""The command line: each module is one area of tasks, collected into `ns`."""
from invoke import Collection

from specfleet.tasks import bench, bundle, collect, facts, provision, report
from specfleet.tasks.common import guarded

ns = Collection()
for t in (facts.facts, provision.provision, provision.stage_model, bench.bench, bench.status, bench.stop,
          collect.collect, report.report, bundle.bundle):
    ns.add_task(t)


def add_collection(sub: Collection) -> None:
    """A collection from outside the package (the repository's testbed tasks: fabfile.py)."""
    ns.add_collection(sub)
    _finish(sub.name)


def _finish(prefix: str | None = None) -> None:
    for name in ns.task_names:
        if prefix is None or name.startswith(prefix + "."):
            ns[name].auto_shortflags = False
            guarded(ns[name])  # bad input: one line, exit 1 (tasks/common.py)


# Long options only: invoke's automatic short flags gave one letter different
# meanings in different tasks (-f was --forks here and --force there).
_finish()
