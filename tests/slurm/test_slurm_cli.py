"""What specfleet reads from Slurm's JSON (facts in, values out)."""
from __future__ import annotations

from specfleet.slurm.cli import gres_gpus, is_active, job_state, parse_nodes


def test_gpu_counts_from_gres_strings():
    assert gres_gpus("gpu:4") == 4 and gres_gpus("gpu:h200:8(S:0-1)") == 8
    assert gres_gpus("nic:1,gpu:a100:2") == 2 and gres_gpus("") == 0 and gres_gpus("(null)") == 0


def test_nodes_from_sinfo_json_old_and_new_state_shapes():
    doc = {"nodes": [{"name": "w1", "state": "idle", "gres": "gpu:2", "partitions": ["gpu"]},
                     {"name": "w2", "state": ["MIXED", "DRAIN"], "gres": "", "partitions": []}]}
    n = parse_nodes(doc)
    assert (n["w1"].state, n["w1"].gpus, n["w1"].partitions) == ("IDLE", 2, ("gpu",))
    assert (n["w2"].state, n["w2"].gpus) == ("MIXED+DRAIN", 0)


def test_job_states_22_05_strings_and_23_lists():
    assert job_state({"job_state": "RUNNING"}) == "RUNNING" and is_active({"job_state": "PENDING"})
    assert job_state({"job_state": ["COMPLETED"]}) == "COMPLETED" and not is_active({"job_state": ["FAILED"]})
    assert job_state(None) == "UNKNOWN" and not is_active(None)
    assert is_active({"job_state": ["PENDING", "REQUEUED"]})
