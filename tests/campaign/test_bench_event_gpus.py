"""`fab bench`'s event log says which GPUs the split was made on, as nvidia-smi named them over SSH
(issue 24: the H200 example's bench log shows the worker's H200)."""
from __future__ import annotations

import json
from types import SimpleNamespace

from specfleet.campaign.remote import ReadWorker
from specfleet.events import EventLog
from specfleet.facts.gpus import Gpu, GpuList
from specfleet.step import Status, StepResult


def test_read_worker_reports_the_gpus_nvidia_smi_named_and_the_event_log_keeps_them(tmp_path):
    step = ReadWorker(SimpleNamespace(name="w1", vars={}), "/tmp/sfgpu/campaigns", "c")
    found = GpuList([Gpu(0, "GPU-00000000-aaaa-bbbb-cccc-000000000000", "NVIDIA H200", 143771)])
    facts = {"gpus": found, "topology": None, "view": None}
    assert step.decide(facts) == [] and step.read(facts).node.gpus_source == "nvidia-smi"
    data = step.report(facts)
    assert data["gpu_names"] == ["0: NVIDIA H200 143771 MiB"] and data["gpus_source"] == "nvidia-smi"
    log = EventLog("bench", tmp_path)
    log.step(StepResult("w1", step.name, Status.OK, data=data))
    log.step(StepResult("w1", "start runner", Status.CHANGED))    # nothing read: no data key
    log.close()
    rows = [json.loads(ln) for ln in log.path.read_text().splitlines()]
    assert rows[1]["data"]["gpu_names"] == ["0: NVIDIA H200 143771 MiB"] and "data" not in rows[2]


def test_an_inventory_gpu_list_is_named_as_the_inventory_gives_it():
    step = ReadWorker(SimpleNamespace(name="w1", vars={"gpus": [{"index": 0, "name": "NVIDIA H200"}]}), "/w", "c")
    facts = {"gpus": None, "topology": None, "view": None}
    assert step.report(facts)["gpu_names"] == ["0: NVIDIA H200"] and step.report(facts)["gpus_source"] == "inventory"
