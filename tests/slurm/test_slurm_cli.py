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


def test_a_drained_or_down_node_is_unusable_in_22_05_and_23_shapes():
    """22.05 says a drain in state_flags (its "state" stays "idle"), 23.02 on in the state list."""
    doc = {"nodes": [{"name": "w1", "state": "idle", "state_flags": ["DRAIN"], "reason": "bad DIMM"},
                     {"name": "w2", "state": ["IDLE", "DRAIN"], "reason": "bad DIMM"},
                     {"name": "w3", "state": "down", "state_flags": ["NOT_RESPONDING"], "reason": ""},
                     {"name": "w4", "state": "idle", "state_flags": ["NOT_RESPONDING"]},
                     {"name": "w5", "state": "mixed", "state_flags": []}]}
    n = parse_nodes(doc)
    assert (n["w1"].state, n["w1"].unusable, n["w1"].reason) == ("IDLE+DRAIN", ["DRAIN"], "bad DIMM")
    assert (n["w2"].state, n["w2"].unusable) == ("IDLE+DRAIN", ["DRAIN"])
    assert n["w3"].unusable == ["DOWN"]
    assert n["w4"].unusable == [] and n["w5"].unusable == []  # a node just resumed answers the next ping


def test_job_states_22_05_strings_and_23_lists():
    assert job_state({"job_state": "RUNNING"}) == "RUNNING" and is_active({"job_state": "PENDING"})
    assert job_state({"job_state": ["COMPLETED"]}) == "COMPLETED" and not is_active({"job_state": ["FAILED"]})
    assert job_state(None) == "UNKNOWN" and not is_active(None)
    assert is_active({"job_state": ["PENDING", "REQUEUED"]})


def test_an_account_is_listed_missing_or_unchecked_by_sacctmgr_s_answer():
    from specfleet.slurm.cli import account_verdict
    assert account_verdict(0, "bench\n", "bench") is True
    assert account_verdict(0, "bench\n", "Bench") is True     # Slurm folds account names to lower case
    assert account_verdict(0, "", "nosuch") is False          # accounting answered: no such account
    assert account_verdict(0, "benchmarks\n", "bench") is False
    assert account_verdict(1, "", "bench") is None            # no slurmdbd: sacctmgr cannot answer


def test_sbatch_s_refusal_is_one_line_naming_file_field_and_value(tmp_path):
    """The refusal text as Slurm words it (slurm_errno.c: ESLURM_INVALID_ACCOUNT, ESLURM_INVALID_PARTITION_NAME,
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE)."""
    from types import SimpleNamespace

    from specfleet.scheduler import SlurmScheduler
    from specfleet.slurm.cli import SlurmError, explain_refusal
    inv = SimpleNamespace(path=tmp_path / "site.yml")
    cfg = SlurmScheduler(kind="slurm", partition="gpu", account="nosuch", time_limit="10", shared_dir="/s")
    said = {why: str(explain_refusal(inv, cfg, SlurmError(f"sbatch refused the job: sbatch: error: Batch job "
                                                          f"submission failed: {why}")))
            for why in ("Invalid account or account/partition combination specified", "Invalid partition name "
                        "specified", "Requested node configuration is not available")}
    lines = list(said.values())
    assert all("\n" not in ln and ln.startswith(f"{inv.path}: field ") for ln in lines)
    assert lines[0].startswith(f"{inv.path}: field 'scheduler.account' (value 'nosuch'): sbatch refused")
    assert lines[1].startswith(f"{inv.path}: field 'scheduler.partition' (value 'gpu'): ")
    assert lines[2].startswith(f"{inv.path}: field 'hosts (the node list)': ")
