"""A secret is masked in every encoding specfleet writes it in (quoting.ENCODINGS -> quoting.mask_forms ->
events.Redactor): raw, shell-quoted, fstab's octal escapes, JSON, YAML, URL, repr. A property test
generates secrets with quotes, backslashes, spaces, non-ASCII and newlines and checks every output
channel: the console (step lines, summaries, messages), --diff, and the event log."""
from __future__ import annotations

import inspect
import io
import json
import urllib.parse

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specfleet import quoting
from specfleet.console import MaskedConsole, Reporter
from specfleet.events import MASK, EventLog, Redactor
from specfleet.step import Change, Status, StepResult

# functions of quoting.py that build on a registered encoding (a composition adds no new form)
COMPOSED = {"join", "env_line", "env_words", "fstab_line", "env_key", "encoding", "mask_forms"}


def test_every_encoding_function_is_registered_with_its_mask():
    public = {n for n, f in vars(quoting).items() if inspect.isfunction(f) and not n.startswith("_")
              and f.__module__ == quoting.__name__}
    registered = {n for n in public if getattr(getattr(quoting, n), "encoding", None)}
    assert public - COMPOSED - registered == set(), "an encoding without a mask: decorate it with @encoding"
    assert {"shell", "fstab", "yaml", "ssh-option", "json", "url", "raw"} <= set(quoting.ENCODINGS)


def test_the_issue_example_an_fstab_escaped_secret_is_masked():
    secret = 'Se"cr\\et-42'
    red = Redactor([secret])
    line = quoting.fstab_line("10.0.0.1:/export", f"/media/{secret}/models", "nfs", "ro", 0, 0)
    assert "Se\"cr\\134et-42" in line
    assert red(line) == f"10.0.0.1:/export /media/{MASK}/models nfs ro 0 0"


SPECIALS = "'\"\\ \t\n$`%&/+=?#;[]{}()*!~<>|" + "éü日本€🔑"
middle = st.text(alphabet=st.sampled_from(SPECIALS) | st.characters(codec="utf-8", exclude_categories=("Cs",)),
                 min_size=1, max_size=16)


def written_forms(secret: str) -> dict[str, str]:
    """The secret as each writer puts it into text (inside larger values, as the roles do)."""
    out = {"raw": f"token={secret}", "json": json.dumps({"v": f"x{secret}y"}),
           "json-utf8": json.dumps({"v": secret}, ensure_ascii=False),
           "url": "https://h/?t=" + urllib.parse.quote(secret, safe=""),
           "url-plus": "t=" + urllib.parse.quote_plus(secret), "repr": f"bad value {('/p/' + secret)!r}",
           "yaml": f"key: {quoting.yaml_str('a' + secret)}"}
    try:
        out["shell"] = quoting.env_line("HF_TOKEN", f"pre{secret}post")
    except ValueError:
        pass
    try:
        out["fstab"] = quoting.fstab_line("srv:/x", f"/media/{secret}/m", "nfs", "ro")
    except ValueError:
        pass
    try:
        out["ssh"] = quoting.ssh_option("UserKnownHostsFile", f"/k/{secret}")
    except ValueError:
        pass
    return out


def leaks(text: str, secret: str) -> list[str]:
    return [f for f in quoting.mask_forms(secret) if f in text]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(mid=middle)
def test_a_generated_secret_never_reaches_an_output_channel(tmp_path, mid):
    secret = f"Tk{mid}9Q"  # fixed ends: no collision with the text around it
    red = Redactor([secret])
    forms = written_forms(secret)
    text = "\n".join(forms.values())
    r = StepResult("w1", f"line in /etc/fstab: {forms.get('fstab', forms['raw'])}", Status.FAILED,
                   [Change(f"write {forms['json']}", forms.get("shell", ""), "\n".join(f"+{v}" for v in forms.values()))],
                   message=f"exit 1: {forms['repr']} {forms['url']}", stderr_tail=text)
    buf = io.StringIO()
    console = MaskedConsole(file=buf, width=300, highlight=False, redact=red, force_terminal=False)
    Reporter(console, verbose=True, diff=True, redact=red)(r)
    shown = buf.getvalue()
    assert not leaks(shown, secret), (secret, leaks(shown, secret), shown)
    assert MASK in shown
    d = tmp_path / f"log-{abs(hash(secret))}"
    log = EventLog("t", directory=d, redact=red)
    log.step(r)
    log.close()
    logged = log.path.read_text()
    assert not leaks(logged, secret), (secret, leaks(logged, secret))
    # the log's lines decode, and no decoded string holds the secret in any form either
    decoded = json.dumps([json.loads(ln) for ln in logged.splitlines()], ensure_ascii=False)
    assert not leaks(decoded, secret)


def test_a_secret_in_fstab_is_masked_in_the_change_summary_console_and_event_log(tmp_path):
    """The fstab line as the nfs role writes it, through the real LineInFile step: its summary names the
    line with repr, so the escaped form appears escaped once more (`\\134`, `\\040` as `\\\\134`,
    `\\\\040`); the step name was masked, that summary was not (console and event log). Masking covers
    every encoding of every encoded form, in the one Redactor."""
    from specfleet.facts.files import LineInFileState
    from specfleet.fleet import Fleet
    from specfleet.steps.files import LineInFile
    secret = "my secret\\share"
    red = Redactor([secret])
    step = LineInFile("/etc/fstab", quoting.fstab_line("srv:/x", f"/media/{secret}/m", "nfs4", "ro", 0, 0))
    state = LineInFileState("/etc/fstab", step.line)
    changes = step.decide({"line": state.parse("missing\n", 0)})
    log = EventLog("provision", directory=tmp_path, redact=red)
    buf = io.StringIO()
    console = MaskedConsole(file=buf, width=300, highlight=False, redact=red, force_terminal=False)
    fleet = Fleet([], events=log, redact=red, on_result=Reporter(console, verbose=True, diff=True, redact=red))
    r = fleet.record_local_for("w1", step.name, Status.CHANGED, changes=changes)
    log.close()
    summary, shown, logged = r.changes[0].summary, buf.getvalue(), log.path.read_text()
    for text in (summary, shown, logged, json.dumps([json.loads(ln) for ln in logged.splitlines()])):
        assert "secret" not in text and "share" not in text, text
    assert f"/media/{MASK}/m" in summary
