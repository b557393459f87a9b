"""Gathering: every step's facts in one batch, a fact two steps need gathered once, a fact that
cannot be read failing its steps only, bastion facts only when the host's say so."""
from __future__ import annotations

from specfleet.facts.gather import gather, gather_here
from specfleet.facts.net import Ipv4Addresses
from specfleet.facts.system import ShellTest
from specfleet.step import Step
from specfleet.steps.command import Command
from specfleet.steps.files import Directory
from specfleet.steps.net import Route

import pytest


def counting(cwd):
    scripts = []

    def run(script, root):
        import subprocess
        scripts.append((script, root))
        return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True).stdout
    return run, scripts


def test_one_batch_and_shared_facts(tmp_path):
    steps = [Route("192.168.160.0/24", "ens35"), Route("10.0.0.0/24", "ens33"), Directory(str(tmp_path / "d"))]
    run, scripts = counting(tmp_path)
    values = gather(steps, run)
    assert len(scripts) == 1  # one round trip for all of them
    assert scripts[0][0].count("ip -o -4 addr show") == 1  # both routes read the one address fact
    assert values[0]["addresses"] is values[1]["addresses"]
    assert values[2]["dir"].kind == "absent"


def test_no_facts_no_round_trip():
    class Nothing(Step):
        name = "nothing"
    run, scripts = counting(None)
    assert gather([Nothing()], run) == [{}]
    assert scripts == []


def test_a_fact_that_cannot_be_read_fails_only_its_steps(tmp_path):
    class Weird(ShellTest):  # prints neither yes nor no
        def command(self):
            return "echo maybe"

    class NeedsWeird(Step):
        name = "weird"

        def facts(self):
            return {"w": Weird("true")}
    marker = tmp_path / "m"
    values = gather_here([NeedsWeird(), Command("touch", f"touch {marker}", creates=str(marker))], str(tmp_path))
    assert isinstance(values[0], Exception) and "could not evaluate" in str(values[0])
    assert values[1] == {"done": False}


def test_root_is_asked_for_only_when_a_fact_needs_it(tmp_path):
    run, scripts = counting(tmp_path)
    gather([Route("192.168.160.0/24", "ens35")], run)
    gather([Command("x", "true", creates="/x")], run)  # a root command's guard is read as root
    assert [root for _, root in scripts] == [False, True]


def test_a_host_fact_asked_for_late_is_refused():
    class Late(Step):
        name = "late"

        def bastion_facts(self, values):
            return {"addresses": Ipv4Addresses()}
    (v,) = gather_here([Late()])
    assert isinstance(v, RuntimeError) and "host fact" in str(v)


def test_rsync_itemizes_only_when_the_listings_differ(tmp_path):
    from specfleet.inventory import load_inventory
    from specfleet.steps.sync import RsyncTree
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a").write_text("a")
    inv = tmp_path / "hosts.yml"
    inv.write_text("hosts:\n  w1: {address: 10.0.0.11}\n")
    step = RsyncTree(load_inventory(inv).hosts["w1"], str(tmp_path / "src"), "/opt/copy")
    same = {"listing": "abc", "local_listing": "abc"}
    assert step.bastion_facts(same) == {} and step.decide(same) == []
    other = {"listing": None, "local_listing": "abc"}
    assert list(step.bastion_facts(other)) == ["items"]
    [c] = step.decide({**other, "items": [">f+++++++++ a"]})
    assert c.local_argv[-2:] == [str(tmp_path / "src") + "/", "10.0.0.11:/opt/copy/"] and c.diff == ">f+++++++++ a"
    with pytest.raises(KeyError):  # decide never runs rsync itself: without the fact it cannot decide
        step.decide(other)
