"""The sbatch submission rendered from hostile values: bash reads back exactly the words specfleet meant,
sbatch's options are argv words (no shell), and the node step maps the allocation into the run spec."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specfleet.scheduler import SlurmScheduler
from specfleet.slurm.script import Job, campaign_dir, render_script, sbatch_argv, slurm_dir

from specfleet.worker.slurm_step import allocated_gpus, effective_spec  # noqa: E402

HOSTILE = "/sh ared/$(touch pwned)/`id`/'q'\"; rm -rf ~ #"


def cfg(**kw) -> SlurmScheduler:
    return SlurmScheduler(**{"kind": "slurm", "partition": "gpu", "time_limit": "02:00:00",
                             "shared_dir": HOSTILE, "python": "/opt/py thon/bin/python3", **kw})


JOB = Job("demo", ("w1", "w2"), 4, "0123abcd")


def test_bash_reads_every_value_back_exactly(tmp_path):
    """Run the script with an `srun` that records its argv: the words are the values, nothing ran."""
    stub = tmp_path / "bin" / "srun"
    stub.parent.mkdir()
    stub.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    f"open({str(tmp_path / 'calls')!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    stub.chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(cfg(), JOB))
    env = {**os.environ, "PATH": f"{stub.parent}:{os.environ['PATH']}", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "w[1-2]"}
    p = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    calls = [json.loads(line) for line in (tmp_path / "calls").read_text().splitlines()]
    c = cfg()
    step = ["/opt/py thon/bin/python3", "-S", f"{slurm_dir(c, 'demo')}/bin/runner.pyz", "slurm-step"]
    assert calls[0][calls[0].index("--") + 1:] == [*step, "check", "--dir", slurm_dir(c, "demo"),
                                                   "--token", "0123abcd"]
    assert calls[1][calls[1].index("--") + 1:] == [*step, "run", "--dir", campaign_dir(c, "demo"),
                                                   "--campaign", "demo", "--python", "/opt/py thon/bin/python3"]
    assert not (tmp_path / "pwned").exists() and not list(tmp_path.glob("*pwned*"))


def test_a_failed_check_step_ends_the_job_before_the_run_step(tmp_path):
    stub = tmp_path / "bin" / "srun"
    stub.parent.mkdir()
    stub.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'calls'}\nexit 3\n")
    stub.chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(cfg(shared_dir="/s"), JOB))
    p = subprocess.run(["bash", str(script)], env={**os.environ, "PATH": f"{stub.parent}:{os.environ['PATH']}"},
                       capture_output=True, text=True)
    assert p.returncode == 3 and len((tmp_path / "calls").read_text().splitlines()) == 1


def test_sbatch_options_are_argv_words_with_the_values_as_given():
    c = cfg(account="team-a", extra_args=["--qos=high", "--comment=a b $(x)"], stop_signal_s=90)
    argv = sbatch_argv(c, JOB)
    assert argv[0] == "sbatch" and argv[-1] == f"{slurm_dir(c, 'demo')}/job.sbatch"
    for word in ("--nodes=2", "--nodelist=w1,w2", "--ntasks-per-node=1", "--gpus-per-node=4", "--partition=gpu",
                 "--account=team-a", "--time=02:00:00", "--signal=TERM@90", "--requeue", "--qos=high",
                 "--comment=a b $(x)", f"--output={slurm_dir(c, 'demo')}/slurm-%j.out"):
        assert word in argv, word
    assert "--test-only" in sbatch_argv(c, JOB, test_only=True) and "--test-only" not in argv
    no = sbatch_argv(cfg(requeue=False, stop_signal_s=0), Job("demo", ("w1",), 0, "t"))
    assert "--no-requeue" in no and not any(w.startswith(("--signal", "--gpus-per-node", "--account")) for w in no)


def test_the_kept_script_records_the_submission_as_one_quoted_comment():
    text = render_script(cfg(extra_args=["--comment=x y'z"]), JOB)
    lines = [ln for ln in text.splitlines() if ln.startswith("#   sbatch")]
    assert len(lines) == 1 and "'--comment=x y'\"'\"'z'" in lines[0]


SPEC = {"port": 8000, "server_host": "127.0.0.1", "gpu_index": 0,
        "items": [{"name": "vanilla", "item_hash": "h1",
                   "serve": {}, "client": {}, "bench": [{}]}]}


def test_one_gpu_node_gets_the_allocated_gpu_and_a_moved_port_hashes_kept():
    eff = effective_spec(SPEC, [3], 23456)
    assert eff["gpu_index"] == 3 and eff["port"] == 23456
    assert eff["items"][0]["item_hash"] == "h1" and SPEC["port"] == 8000  # the bastion's spec is untouched


def test_several_gpus_are_remapped_with_groups_and_pins():
    spec = {**SPEC, "gpus": [{"index": 0, "uuid": "GPU-a"}, {"index": 1, "uuid": "GPU-b"}],
            "gpu_groups": [[0, 1]], "items": [{**SPEC["items"][0], "gpu_pin": 1}]}
    eff = effective_spec(spec, [2, 3], 8000)
    assert [g["index"] for g in eff["gpus"]] == [2, 3] and all("uuid" not in g for g in eff["gpus"])
    assert eff["gpu_groups"] == [[2, 3]] and eff["items"][0]["gpu_pin"] == 3
    with pytest.raises(ValueError, match="planned 2 GPUs on this node, Slurm allocated 1"):
        effective_spec(spec, [5], 8000)


def test_the_allocation_comes_from_the_step_environment():
    assert allocated_gpus({"CUDA_VISIBLE_DEVICES": "2,3", "SLURM_JOB_GPUS": "0,1,2,3"}) == [2, 3]
    assert allocated_gpus({"SLURM_JOB_GPUS": "1"}) == [1]
    assert allocated_gpus({"CUDA_VISIBLE_DEVICES": "GPU-uuid"}) == [] and allocated_gpus({}) == []
