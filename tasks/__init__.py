"""The command line: each module is one area of tasks, collected into `ns`."""
from invoke import Collection

from tasks import bench, collect, facts, provision
from tasks import bundle
from tasks import testbed as testbed_tasks

ns = Collection()
ns.add_task(facts.facts)
ns.add_task(provision.provision)
ns.add_task(provision.stage_model)
ns.add_task(bench.bench)
ns.add_task(bench.status)
ns.add_task(bench.stop)
ns.add_task(collect.collect)
ns.add_collection(testbed_tasks.ns)
ns.add_task(bundle.bundle)
