"""Secrets never appear in clear: console (step names, summaries, --diff, tables), event log (also
JSON-escaped forms), step data. A run through the real Fleet/Reporter/EventLog, without hosts."""
import io
import json

from rich.console import Console
from rich.table import Table

from specfleet.console import MaskedConsole, Reporter
from specfleet.events import MASK, EventLog, Redactor
from specfleet.step import Change, Status, StepResult

SECRETS = ['pa"ss\\wörd', "hf_tok€n_1234", "long secret with spaces and 'quotes'", "ünïcødé-only"]


def forms(secret: str) -> list[str]:
    """Every way the secret could appear: raw, JSON-escaped (ASCII and not), repr."""
    return sorted({secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
                   repr(secret)[1:-1]} - {""})


def leaked(text: str) -> list[str]:
    return [f for s in SECRETS for f in forms(s) if f in text]


def result_with_secrets() -> StepResult:
    s0, s1, s2, s3 = SECRETS
    return StepResult(
        "w1", f"line in /etc/x: token={s0}", Status.CHANGED,
        [Change(f"add line 'TOKEN={s1}' to /etc/x", f"printf %s '{s1}'", f"+export HF_TOKEN={s1}\n-old {s2}")],
        message=f"exit 1: {s2}", stderr_tail=f"error near {s3}", data={"model": {"path": f"/m/{s0}"}, s3: [s1]})


def test_event_log_masks_before_encoding(tmp_path):
    red = Redactor(SECRETS)
    log = EventLog("t", directory=tmp_path, redact=red)
    r = result_with_secrets()
    log.step(r)
    log.write({"event": "warning", "message": f"dup {SECRETS[0]}", "nested": {SECRETS[1]: [SECRETS[2]]}})
    log.close({"exit_code": 0, "note": SECRETS[3]})
    text = log.path.read_text()
    assert not leaked(text), leaked(text)
    assert text.count(MASK) >= 8
    # without the fix masking ran on the encoded text: `"` and `\` became \" and \\ and slipped through
    assert all(json.loads(ln) for ln in text.splitlines())


def test_console_masks_step_names_summaries_diff_and_tables():
    buf = io.StringIO()
    red = Redactor(SECRETS)
    console = MaskedConsole(file=buf, width=60, highlight=False, redact=red, force_terminal=False)
    rep = Reporter(console, verbose=True, diff=True, check=True, redact=red)
    r = result_with_secrets()
    r.status = Status.FAILED
    rep(r)
    table = Table(title=f"title {SECRETS[1]}")
    table.add_column("a")
    table.add_row(f"cell {SECRETS[2]}")
    console.print(table)
    console.print(f"[bold]{SECRETS[0]}[/] and {SECRETS[3]}", markup=False)
    out = buf.getvalue()
    assert not leaked(out), (leaked(out), out)
    assert MASK in out


def test_fleet_records_masked_results(tmp_path):
    from specfleet.fleet import Fleet
    seen = []
    fleet = Fleet([], events=EventLog("t", directory=tmp_path, redact=Redactor(SECRETS)),
                  redact=Redactor(SECRETS), on_result=seen.append)
    r = result_with_secrets()
    fleet.record_local_for(r.host, r.step, r.status, r.message, changes=r.changes, stderr_tail=r.stderr_tail,
                           data=r.data)
    r = seen[0]
    text = json.dumps([r.step, r.message, r.stderr_tail, r.data, [(c.summary, c.diff) for c in r.changes]],
                      ensure_ascii=False)
    assert not leaked(text), leaked(text)
    assert SECRETS[1] in r.changes[0].script  # what runs is the real value; it is never printed
    assert not leaked(fleet.events.path.read_text())


def test_plain_console_would_leak():
    """The check above can fail: an unmasked console shows the secret."""
    buf = io.StringIO()
    Reporter(Console(file=buf, width=60), verbose=True, diff=True)(result_with_secrets())
    assert leaked(buf.getvalue())
