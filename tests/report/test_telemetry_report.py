"""Telemetry in the report: per run mean power, J/token, throttle flags, the timeline plot; a run
without a file is left out, one with no GPU samples is 'not recorded'; a failed gate shows the nodes'
telemetry side by side."""
from __future__ import annotations

import json

import pytest

from campaign_builder import REPORT, write_campaign
from specfleet.report.build import report_plan
from specfleet.report.render.telemetry_report import TIMELINE_IMAGE, telemetry_table

from compare_builder import campaign, plan_raw
from specfleet.plan import parse_plan


def tel_file(path, powers, mask="0x0000000000000000", t0=1000.0, problems=()):
    rows = [{"kind": "header", "problems": list(problems), "period_s": 1.0}]
    for i, p in enumerate(powers):
        rows.append({"kind": "sample", "t": t0 + i, "gpus": [{"index": 0, "power_w": p, "sm_mhz": 1980, "temp_c": 50 + i,
                                                               "clock_event_reasons": mask}] if p is not None else [],
                     "server": {"running": 4, "waiting": 0, "generation_tokens": 100.0 * i, "preemptions": i}})
    rows.append({"kind": "end"})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_per_run_power_energy_and_throttle(tmp_path):
    camp = write_campaign(tmp_path / "c")
    tel_file(camp / "w1" / "vanilla_conc16.telemetry.jsonl", [300, 310, 320])
    tel_file(camp / "w2" / "eagle3_conc16.telemetry.jsonl", [400, 400], mask="0x0000000000000004")
    tel_file(camp / "w2" / "vanilla_conc16.telemetry.jsonl", [None, None], problems=["GPU telemetry not recorded: x"])
    from specfleet.report.scan.folder import scan_campaign
    df = telemetry_table(scan_campaign(camp, quarantine=False)).set_index(["config", "node", "concurrency"])
    v = df.loc[("vanilla", "w1", 16)]
    out, dur = REPORT[("w1", "vanilla", 16)][0], REPORT[("w1", "vanilla", 16)][5]
    assert v.power_w == pytest.approx(310) and v.throttle == "" and v.temp_max_c == 52
    assert v.j_per_token == pytest.approx(310 * dur / round(out * dur)) and v.preemptions == 2
    assert df.loc[("eagle3", "w2", 16)].throttle == "SW power cap"
    nr = df.loc[("vanilla", "w2", 16)]
    assert nr.throttle == "not recorded" and "GPU telemetry not recorded" in nr.note
    assert ("ngram", "w1", 1) not in df.index  # no telemetry file: no row


def test_report_section_plot_and_gate_differences(tmp_path):
    raw = plan_raw()
    d = campaign(tmp_path / "results", raw, seed=1)
    for f in d.glob("w*/*_conc16_r*.json"):
        tel_file(f.with_name(f.name.removesuffix(".json") + ".telemetry.jsonl"), [300, 300])
    plan = parse_plan(raw, "plans/demo.yml")
    out = report_plan(plan, "plans/demo.yml", tmp_path / "results", quiet=True)
    md = (d / "report.md").read_text()
    assert "## Telemetry per run" in md and TIMELINE_IMAGE in md and (d / TIMELINE_IMAGE).is_file()
    assert "<svg" in (d / TIMELINE_IMAGE).read_text()
    # the run column is the repeat's number (was pandas' Series.repeat method printed as text)
    rows = [ln.split(" | ") for ln in md.split("## Telemetry per run")[1].split("\n## ")[0].splitlines()
            if ln.startswith("| vanilla |")]
    assert rows and sorted({r[4] for r in rows}) == ["1", "2", "3"], rows[:2]
    # report.html carries the timeline itself (offline: no file to follow), in the telemetry section
    page = (d / "report.html").read_text()
    tel_at, fig_at = page.index('id="telemetry-per-run"'), page.index('id="figure-telemetry-timeline.svg"')
    assert tel_at < fig_at < page.index("</table>", tel_at) and "<svg" in page[fig_at:fig_at + 400]
    assert "SIMULATED" not in page  # the builder's files are the real engine's
    # w2's baseline 20 % faster and throttled: the gate fails and the telemetry differences are named
    for f in d.glob("w2/vanilla_conc16_r*.json"):
        r = json.loads(f.read_text())
        r["output_throughput"] *= 1.2
        r["mean_tpot_ms"] /= 1.2  # the gate's metric (token-weighted TPOT, vLLM's mean without arrays)
        f.write_text(json.dumps(r))
        tel_file(f.with_name(f.name.removesuffix(".json") + ".telemetry.jsonl"), [450, 450], mask="0x80")
    out = report_plan(plan, "plans/demo.yml", tmp_path / "results", quiet=True)
    assert not out.merged and not (d / TIMELINE_IMAGE).exists()
    lines = out.model.gate_telemetry
    assert any("telemetry w1 (vanilla, conc 16): mean power 300.0 W" in w and "throttle: none" in w for w in lines)
    assert any("telemetry w2" in w and "450.0 W" in w and "HW thermal" in w for w in lines)
    # printed right after the gate's verdict line; with --force the report shows them under it too
    from io import StringIO
    from rich.console import Console
    buf = StringIO()
    report_plan(plan, "plans/demo.yml", tmp_path / "results", console=Console(file=buf, width=300))
    printed = buf.getvalue().splitlines()
    at = next(i for i, ln in enumerate(printed) if ln.startswith("Node equivalence " + out.model.gate_verdict))
    after = printed[at + 1:at + 6]
    assert any("telemetry w2" in ln and "HW thermal" in ln for ln in after), printed[at:at + 6]
    out = report_plan(plan, "plans/demo.yml", tmp_path / "results", quiet=True, force=True)
    md = (d / "report.md").read_text()
    at = md.index("Node equivalence:")  # under the answer, before the next section
    head = md[at:md.index("## ", at)]
    assert "telemetry w2" in head and "HW thermal" in head
    page = (d / "report.html").read_text()
    assert page.index('id="gate-telemetry"') < page.index('id="summary"')
    assert (d / TIMELINE_IMAGE).is_file()


def test_simulated_timeline_is_stamped_in_the_report(tmp_path):
    camp = write_campaign(tmp_path / "c", extra={"simulated": True, "engine": "specfleet-simvllm"})
    for f in camp.glob("w*/*_conc16.json"):
        tel_file(f.with_name(f.name.removesuffix(".json") + ".telemetry.jsonl"), [300, 300, 300])
    from specfleet.report.render.plots import SIM_TITLE
    from specfleet.report.build import report_campaign
    out = report_campaign(camp, quiet=True)
    assert out.merged and out.simulated
    page = (camp / "report.html").read_text()
    fig = page[page.index('id="figure-telemetry-timeline.svg"'):]
    fig = fig[:fig.index("</svg>")]
    assert f"<title>{SIM_TITLE}</title>" in fig and 'id="timeline-simulated-stamp' in fig
    assert 'href="http' not in fig and "<image" not in fig  # nothing fetched from outside
    assert f"<title>{SIM_TITLE}</title>" in (camp / TIMELINE_IMAGE).read_text()


def test_nesting_bomb_line_is_refused_and_the_report_still_made(tmp_path):
    # one hostile line among good ones: the report is made (was RecursionError, exit 70 of every
    # fab collect and fab report), the good samples count and the note names the refused line
    raw = plan_raw()
    d = campaign(tmp_path / "results", raw, seed=1)
    for f in d.glob("w*/*_conc16_r*.json"):
        tel_file(f.with_name(f.name.removesuffix(".json") + ".telemetry.jsonl"), [300, 300])
    bombed = sorted(d.glob("w1/vanilla_conc16_r*.telemetry.jsonl"))[0]
    bombed.write_text(bombed.read_text() + "[" * 100_000 + "]" * 100_000 + "\n")
    out = report_plan(parse_plan(raw, "plans/demo.yml"), "plans/demo.yml", tmp_path / "results", quiet=True)
    assert out.merged
    md = (d / "report.md").read_text()
    assert f"{bombed.name} line 5 refused: JSON nested 100000 levels deep" in md
    from specfleet.report.scan.folder import scan_campaign
    df = telemetry_table(scan_campaign(d, quarantine=False))
    assert (df.power_w == 300).all()


def test_a_workers_escape_codes_and_html_never_reach_the_report_raw(tmp_path):
    """Text a worker wrote (here its telemetry header's problems; a result's fields go the same way)
    reached report.md raw: terminal escape codes and HTML, which a Markdown viewer renders. Every value
    leaves the templates through one finalize: controls shown as escapes, a '<' that opens HTML as '&lt;' in Markdown."""
    raw = plan_raw()
    d = campaign(tmp_path / "results", raw, seed=1)
    hostile = "\x1b[2J\x1b[31mpwned\x1b[0m \x07<img src=x onerror=alert(1)>"
    for f in d.glob("w*/*_conc16_r*.json"):
        tel_file(f.with_name(f.name.removesuffix(".json") + ".telemetry.jsonl"), [None], problems=[hostile])
    report_plan(parse_plan(raw, "plans/demo.yml"), "plans/demo.yml", tmp_path / "results", quiet=True)
    md, page = (d / "report.md").read_text(), (d / "report.html").read_text()
    assert "\\x1b[2J\\x1b[31mpwned\\x1b[0m \\x07&lt;img src=x onerror=alert(1)>" in md
    assert "\x1b" not in md + page and "\x07" not in md + page and "<img" not in md + page
    assert "\\x1b[31mpwned" in page and "&lt;img src=x" in page
