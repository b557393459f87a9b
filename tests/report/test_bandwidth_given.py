"""A bandwidth given to the report (the inventory's gpu_memory_bandwidth_gbps, per host as collect saved
it, or `fab report --gpu-bandwidth-gbps`) that contradicts the named GPU's datasheet is shown beside the
datasheet's figure, with a warning (issue 41: an H100 given the H200's 4800 GB/s was silently 30 % off)."""
from __future__ import annotations

import json

import pytest

from specfleet.report import report_campaign
from specfleet.collect.fetch import bandwidth_given
from specfleet.report.tables.merge import node_bandwidths

from campaign_builder import write_campaign

H100 = "NVIDIA H100 80GB HBM3"


def _h100_campaign(tmp_path, given_w1=None):
    root = write_campaign(tmp_path / "c", extra={"gpu": H100})
    for host in ("w1", "w2"):  # what collect writes: the probe's record and the host's inventory figure
        extra = bandwidth_given(given_w1) if host == "w1" else {}
        (root / host / "provenance.json").write_text(json.dumps({"host": host, "gpu_name": H100, **extra}))
    return root


def _bw_section(root) -> str:
    return (root / "report.md").read_text().split("## Memory-bandwidth bound", 1)[1].split("\n## ", 1)[0]


def test_an_h100_given_4800_warns_and_shows_the_datasheets_3350_beside_it(tmp_path):
    root = _h100_campaign(tmp_path)
    o = report_campaign(root, quiet=True, force=True, gpu_bandwidth_gbps=4800)
    warns = [w for w in o.warnings if w.startswith("GPU memory bandwidth on ")]
    assert len(warns) == 2 and all("4800 GB/s given (--gpu-bandwidth-gbps)" in w and f'"{H100}" has 3350 GB/s'
                                   in w and "+43 %" in w for w in warns), warns
    bw = o.tables.bandwidth
    assert set(bw.bandwidth_gbps) == {4800} and set(bw.datasheet_gbps) == {3350}
    weights = 61.0348   # the builder's server log: "Model loading took 61.0348 GiB"
    assert set(bw.datasheet_bound_tpot_ms.round(3)) == {round(weights * 2**30 / 3350e9 * 1000, 3)}
    row = bw[(bw.config == "vanilla") & (bw.concurrency == 1) & (bw.node == "w1")].iloc[0]
    assert row.datasheet_fraction == pytest.approx(row.datasheet_bound_tpot_ms / row.tpot_ms)
    sec = _bw_section(root)
    assert "GB/s datasheet" in sec and "| 4,800 | 3,350 | 19.56 |" in sec and "WARNING" in sec, sec
    assert "GPU memory bandwidth on w1: 4800 GB/s given (--gpu-bandwidth-gbps)" in (root / "report.md").read_text()


def test_inventory_figures_stay_per_host_and_come_back_from_the_campaign_folder(tmp_path):
    root = _h100_campaign(tmp_path, given_w1=4800)
    o = report_campaign(root, quiet=True, force=True)   # as `fab report` after `fab collect`: no flag
    b = o.tables.bandwidths
    assert (b["w1"].gbps, b["w1"].source, b["w1"].datasheet) == (4800, "inventory gpu_memory_bandwidth_gbps", 3350)
    assert (b["w2"].gbps, b["w2"].datasheet) == (3350, None) and "H100 SXM datasheet" in b["w2"].source
    assert [w for w in o.warnings if w.startswith("GPU memory bandwidth on ")] == [
        w for w in o.warnings if w.startswith("GPU memory bandwidth on w1: 4800 GB/s given (inventory")]
    assert o.tables.min_tpot_ms is None   # two bounds: per node in the table
    assert "w1 4800 GB/s (inventory gpu_memory_bandwidth_gbps); w2 3350 GB/s" in _bw_section(root)


def test_a_figure_within_a_few_percent_of_the_datasheet_is_used_without_a_word():
    b, warns = node_bandwidths({"w1": H100, "w2": "NVIDIA H200"}, {"w1": 3300, "w2": 4800})
    assert not warns and (b["w1"].gbps, b["w2"].gbps) == (3300, 4800) and not b["w1"].conflict
    # a GPU the look-up does not know: the given figure is used, nothing to compare it with
    b, warns = node_bandwidths({"w1": "NVIDIA GeForce GTX 1080"}, 320.0)
    assert not warns and b["w1"].gbps == 320 and b["w1"].datasheet is None
