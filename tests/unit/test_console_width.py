"""Without a terminal (a log, CI, a pipe) a table is printed whole: rich's 80 columns cut every wider one
to `│ v… │ w1 │ 2… │` (specfleet/console.py NO_TERMINAL_WIDTH)."""
from __future__ import annotations

import io
import os
import subprocess
import sys

from rich.table import Table

from specfleet.console import MaskedConsole, Reporter
from specfleet.step import Status

LONG = "eagle3_tp2_with_a_configuration_name_as_long_as_users_write_them"


def test_a_wide_table_without_a_terminal_keeps_every_cell_whole(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    console = MaskedConsole(file=out, highlight=False)
    t = Table()
    for col in ("configuration", "node", "speedup", "95 % interval", "TTFT p50 ms", "TTFT p99 ms", "notes"):
        t.add_column(col)
    t.add_row(LONG, "w1", "1.234", "1.201-1.268", "123456.789", "234567.891", "steady state: report-setup")
    console.print(t)
    text = out.getvalue()
    assert "…" not in text and LONG in text and "123456.789" in text and "1.201-1.268" in text, text
    assert max(map(len, text.splitlines())) > 80


def test_columns_still_wins_and_the_recap_of_a_real_fab_run_is_whole(tmp_path):
    out = io.StringIO()
    rep = Reporter(MaskedConsole(file=out, highlight=False, width=60))
    rep.recap({LONG: {s.value: 0 for s in Status}}, {})
    assert "…" in out.getvalue()  # an explicit width is kept
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    inv = tmp_path / "inv.yml"
    hosts = [f"gpu-node-{i:02d}.rack-{i}.datacenter-north.example" for i in range(1, 4)]  # unreachable: TEST-NET
    inv.write_text("all: {user: root, connect_timeout: 1}\nhosts:\n"
                   + "".join(f"  {h}: {{address: 192.0.2.{i + 1}}}\n" for i, h in enumerate(hosts)))
    p = subprocess.run([os.path.join(os.path.dirname(sys.executable), "fab"), "facts", "--inventory", str(inv)],
                       capture_output=True, text=True, env={**env, "SPECFLEET_RUNS_DIR": str(tmp_path / "runs")},
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))), timeout=120)
    recap = p.stdout[p.stdout.index("RECAP facts"):]
    assert all(h in recap for h in hosts) and "…" not in recap, p.stdout
