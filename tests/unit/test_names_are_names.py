"""Names are names (issue 28): a host, group or configuration name with a trailing newline (Python's
`$` matches before one) or any control character is refused in one line naming the file and field."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from specfleet import quoting
from specfleet.plan import PlanError, parse_plan
from specfleet.inventory import InventoryError, load_inventory

PROJECT = Path(__file__).resolve().parents[2]
PLAN = PROJECT / "tests/e2e/plans/fast.yml"
BAD = ["w1\n", "w1\r", "w 1", "w1\t", "w\x1b1", "\nw1", "w1\n\n"]


def _inventory(tmp_path: Path, hosts: dict, groups: dict | None = None) -> Path:
    key = tmp_path / "key"
    key.write_text("k")
    f = tmp_path / "inv.yml"
    f.write_text(yaml.safe_dump({"all": {"key": str(key)}, "hosts": hosts, "groups": groups or {}}))
    return f


@pytest.mark.parametrize("name", BAD)
def test_a_host_name_with_a_newline_or_control_character_is_refused(tmp_path, name):
    f = _inventory(tmp_path, {name: {"address": "10.0.0.1"}})
    with pytest.raises(InventoryError) as e:
        load_inventory(f)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{f}: host {name!r}, field 'hosts'"), msg


@pytest.mark.parametrize("name", BAD)
def test_a_group_name_likewise(tmp_path, name):
    f = _inventory(tmp_path, {"w1": {"address": "10.0.0.1"}}, {name: {"hosts": ["w1"]}})
    with pytest.raises(InventoryError) as e:
        load_inventory(f)
    assert "\n" not in str(e.value) and f"group {name!r}, field 'groups'" in str(e.value)


def test_plain_names_and_rfc1123_addresses_pass(tmp_path):
    f = _inventory(tmp_path, {"w1": {"address": "gpu-1.lab.example"}, "node_2.a": {"address": "10.0.0.2"}})
    assert set(load_inventory(f).hosts) == {"w1", "node_2.a"}
    for bad in ("-gpu", "gpu_1.lab", "gpu 1"):
        g = _inventory(tmp_path, {"w1": {"address": bad}})
        with pytest.raises(InventoryError) as e:
            load_inventory(g)
        assert "\n" not in str(e.value) and "field 'address'" in str(e.value)


@pytest.mark.parametrize("name", BAD[:3])
def test_a_configuration_or_campaign_name_with_a_newline_is_refused(tmp_path, name):
    raw = yaml.safe_load(PLAN.read_text())
    for where in ("configurations", "campaign"):
        doc = copy.deepcopy(raw)
        if where == "campaign":
            doc["campaign"] = name
        else:
            doc["configurations"][1]["name"] = name
        f = tmp_path / "plan.yml"
        f.write_text(yaml.safe_dump(doc))
        with pytest.raises(PlanError) as e:
            parse_plan(yaml.safe_load(f.read_text()), f)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"{f}: ") and "field" in msg and where.rstrip("s") in msg, msg


def test_an_env_key_with_a_trailing_newline_is_not_a_variable_name():
    with pytest.raises(ValueError):
        quoting.env_key("HF_TOKEN\n")


def test_a_newline_in_a_dataset_path_keeps_the_error_one_line(tmp_path):
    import os
    import subprocess
    import sys
    raw = yaml.safe_load(PLAN.read_text())
    raw["benchmark"]["dataset_path"] = str(tmp_path / "no\nsuch.jsonl")
    plan = tmp_path / "plan.yml"
    plan.write_text(yaml.safe_dump(raw))
    inv = _inventory(tmp_path, {"w1": {"address": "10.99.99.1"}})
    fab = str(Path(sys.executable).parent / "fab")
    r = subprocess.run([fab, "bench", "--plan", str(plan), "--inventory", str(inv), "--check"], cwd=PROJECT,
                       env={**os.environ, "SPECFLEET_RUNS_DIR": str(tmp_path / "runs")}, capture_output=True,
                       text=True, timeout=120)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert r.returncode == 1 and len(lines) == 1, lines
    assert "field 'benchmark.dataset_path'" in lines[0] and "no\\nsuch.jsonl" in lines[0], lines
