"""The inventory's `scheduler:` block: each bad value is one line naming the file and the field."""
from __future__ import annotations

import pytest
import yaml

from specfleet.inventory import InventoryError, load_inventory

GOOD = {"kind": "slurm", "partition": "gpu", "time_limit": "01:00:00", "shared_dir": "/shared/sf"}


def inv(tmp_path, scheduler) -> object:
    f = tmp_path / "inv.yml"
    f.write_text(yaml.safe_dump({"scheduler": scheduler, "hosts": {"w1": {"address": "10.0.0.1"}}}))
    return load_inventory(f)


def error(tmp_path, scheduler) -> str:
    with pytest.raises(InventoryError) as e:
        inv(tmp_path, scheduler)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_slurm_block_loads_with_its_defaults(tmp_path):
    i = inv(tmp_path, GOOD)
    assert i.slurm.partition == "gpu" and i.slurm.account is None and i.slurm.requeue is True
    assert i.slurm.pending_timeout_s == 600 and i.slurm.extra_args == []


def test_no_block_and_kind_ssh_mean_ssh_fan_out(tmp_path):
    f = tmp_path / "plain.yml"
    f.write_text(yaml.safe_dump({"hosts": {"w1": {"address": "10.0.0.1"}}}))
    assert load_inventory(f).slurm is None
    assert inv(tmp_path, {"kind": "ssh"}).slurm is None


@pytest.mark.parametrize("field,value,says", [
    ("partition", "gpu;rm -rf /", "is not a Slurm name"),
    ("partition", "-p", "is not a Slurm name"),
    ("partition", "gpu\n", "is not a Slurm name"),   # `$` alone matches before a last newline
    ("account", "a b", "is not a Slurm name"),
    ("time_limit", "01:00:00\n", "is not a Slurm time limit"),
    ("account", "$(reboot)", "is not a Slurm name"),
    ("time_limit", "1 hour", "is not a Slurm time limit"),
    ("time_limit", "01:00:00\n#SBATCH --exclusive", "is not a Slurm time limit"),
    ("shared_dir", "relative/path", "is not an absolute path"),
    ("shared_dir", "/a/../etc", "is not an absolute path"),
    ("shared_dir", "/shared\nrm", "newline or control character"),
    ("extra_args", ["--qos=high\n--exclusive"], "newline or control character"),
    ("extra_args", ["qos=high"], "is not one sbatch option"),
    ("extra_args", ["--time=99:00:00"], "is set by specfleet itself"),
    ("extra_args", ["--wrap=rm -rf /"], "is set by specfleet itself"),
    ("pending_timeout_s", 0, "greater than 0"),
    ("requeue", "yes", "valid boolean"),
])
def test_hostile_or_wrong_values_are_refused_naming_the_field(tmp_path, field, value, says):
    msg = error(tmp_path, {**GOOD, field: value})
    assert f"inv.yml: field 'scheduler.{field}" in msg and says in msg, msg


def test_missing_and_unknown_fields_are_named(tmp_path):
    assert "field 'scheduler.partition': is required" in error(tmp_path, {k: v for k, v in GOOD.items()
                                                                           if k != "partition"})
    assert "field 'scheduler.partiton': unknown field" in error(tmp_path, {**GOOD, "partiton": "x"})
    assert "scheduler" in error(tmp_path, {**GOOD, "kind": "pbs"})
