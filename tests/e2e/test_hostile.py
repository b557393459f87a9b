"""Hostile input corpus (issue 11.1): every string field of the inventory and the plan, set to each
hostile string, is either refused (one line naming file, host and field; exit 1) or inert.

Two phases, so that the suite stays fast:
1. every (field, hostile string) pair is loaded in-process (inventory / plan validation, no host):
   a refusal must name the file, the host (or group/bastion/configuration) and the field;
2. per hostile string, the accepted values go into a few inventories at once (RUNS: A the workers'
   values with `fab provision`, `--check --diff` and `fab bench --check` with the hostile plan; B
   the bastion's build inputs; C the base interpreter; D the venv path) and run on the testbed. In
   A the fields are spread over the four workers so that one field's failure (a share that cannot
   be mounted) does not hide another field's use (the model directory). After every run no canary file exists on
   the bastion or on any worker, and no run crashed (no traceback, exit code not 1).
"""
from __future__ import annotations

import copy
import os
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from e2e_helpers import PROJECT, fab, host_sh, inventory_of
from specfleet.plan import PlanError, parse_plan
from specfleet.inventory import InventoryError, load_inventory
from specfleet.roles import vars_model

pytestmark = pytest.mark.e2e

TOKEN = secrets.token_hex(4)
CANARY = f"/tmp/sf-canary-{TOKEN}"
HOSTILE = {
    "subst": f"$(touch {CANARY})",
    "backtick": f"`touch {CANARY}`",
    "semicolon": f"x;touch${{IFS}}{CANARY}",
    "and": f"x&&touch${{IFS}}{CANARY}",
    "newline": f"a\ntouch {CANARY}",
    "quotes": f"it's \"q\" '$(touch {CANARY})'",
    "backslash": f"back\\slash\\$(touch${{IFS}}{CANARY})",
    "space": "with space",
    "nonascii": "Grüße日本語",
    "dash": f"-oProxyCommand=touch${{IFS}}{CANARY}",
}
PLAN = PROJECT / "tests" / "e2e" / "plans" / "fast.yml"


# Under /opt: a worker's /opt is its own (testbed/seed.py), while /tmp is the machine's. The bastion
# builds hostile venvs there too (the workers get the venv at the same path); removed afterwards.
HOSTILE_ROOT = "/opt/sf-hostile"


def _path(h: str, field: str) -> str:
    """A path holding `h`, one per field (an env file at the venv's path would only test a collision)."""
    return f"{HOSTILE_ROOT}/{field}/{h}"


# (name, where, setter): `where` is 'all', 'bastion' or a worker; setter(vars_or_entry, h, ctx)
def _var(name, make=lambda h: h):
    def set_(target, h, ctx):
        target.setdefault("vars", {})[name] = make(h)
    return set_


def _conn(name):
    def set_(target, h, ctx):
        target[name] = h
    return set_


def _conn_file(kind):
    """key / known_hosts: a copy of the testbed's file under a hostile name."""
    def set_(target, h, ctx):
        src = Path(ctx["orig"][kind])
        dest = ctx["tmp"] / f"conn-{kind}" / h.replace("/", "_")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest)
        os.chmod(dest, 0o600)
        target[kind] = str(dest)
    return set_


INVENTORY_FIELDS = [
    # connection settings (w4: its ssh key and known_hosts also serve rsync's OpenSSH)
    ("user", "w4", _conn("user")),
    ("key", "w4", _conn_file("key")),
    ("known_hosts", "w4", _conn_file("known_hosts")),
    ("address", "w3", _conn("address")),
    # the venv the bastion builds (all: the workers get it at the same path)
    # run D: the venv's path (the bastion builds it there: setuptools refuses to build into a path
    # with `$`, an inert failure that would leave run A's env file unwritten)
    ("venv_path", "all:D", _var("venv_path", lambda h: _path(h, "venv_path"))),
    # run B: what makes the bastion's venv build or the dataset placement fail, so not in run A
    ("venv_requirements", "bastion:B", _var("venv_requirements", lambda h: [str(PROJECT / "testbed" / "simvllm"), h])),
    ("venv_verify_packages", "bastion:B", _var("venv_verify_packages", lambda h: ["vllm", h])),
    ("wheelhouse", "bastion:B", _var("wheelhouse", lambda h: _path(h, "wheelhouse"))),
    ("datasets", "bastion:B", _var("datasets", lambda h: [_path(h, "datasets")])),
    ("gpu_arch", "bastion:B", _var("gpu_arch")),
    ("venv_fixups", "bastion:B", _var("venv_fixups")),
    # run C: the base interpreter (read on the bastion only)
    ("base_python", "bastion:C", _var("base_python", lambda h: _path(h, "base_python"))),
    # env file, configs, bench paths (w1)
    ("env_file", "w1", _var("env_file", lambda h: _path(h, "env_file"))),
    ("cuda_subdir", "w1", _var("cuda_subdir")),
    ("cc", "w1", _var("cc")),
    ("extra_env.key", "w1", _var("extra_env", lambda h: {h: "1"})),
    ("extra_env.value", "w1", _var("extra_env", lambda h: {"SF_HOSTILE": h})),
    ("specfleet_home", "w1", _var("specfleet_home", lambda h: _path(h, "specfleet_home"))),
    ("bench_work_dir", "w1", _var("bench_work_dir", lambda h: _path(h, "bench_work_dir"))),
    ("runner_python", "w1", _var("runner_python", lambda h: _path(h, "runner_python"))),
    ("model_source", "w1", _var("model_source")),
    # the share and the model directory (w2: mounted at a hostile path, served from under it)
    ("nfs_mount", "w2", _var("nfs_mount", lambda h: _path(h, "nfs_mount"))),
    ("model_candidates", "w2", _var("model_candidates", lambda h: [f"/mnt/{h}", f"{_path(h, 'nfs_mount')}/models/Qwen3-32B"])),
    ("nvidia_modules", "w2", _var("nvidia_modules", lambda h: ["nvidia", h])),
    # what makes a mount fail (w3: the host drops out, the others go on)
    ("nfs_export", "w3", _var("nfs_export", lambda h: _path(h, "nfs_export"))),
    ("nfs_server", "w3", _var("nfs_server")),
    ("nfs_options", "w3", _var("nfs_options")),
    ("storage_iface", "w3", _var("storage_iface")),
    ("storage_net", "w3", _var("storage_net")),
    ("storage_ip", "w3", _var("storage_ip")),
    ("mgmt_iface", "w4", _var("mgmt_iface")),
]
# names are keys, not fields: refused unless they are plain names
NAME_FIELDS = ["host name", "group name"]


def _set_plan(path):
    def set_(doc, h):
        *parents, last = path
        node = doc
        for p in parents:
            node = node[p]
        node[last] = h(node[last]) if callable(h) else h
    return set_


PLAN_FIELDS = [
    ("campaign", ["campaign"], lambda h: h),
    ("vllm_version", ["vllm_version"], lambda h: h),
    ("model.name", ["model", "name"], lambda h: h),
    ("model.candidates", ["model", "candidates"], lambda h: [f"/mnt/{h}", "/mnt/fabrix/models/Qwen3-32B"]),
    ("model.served_name", ["model", "served_name"], lambda h: h),
    ("server.args", ["server", "args"], lambda h: ["--max-model-len", "2048", h]),
    ("server.host", ["server", "host"], lambda h: h),
    ("configurations.name", ["configurations", 1, "name"], lambda h: h),
    ("speculative_config.method", ["configurations", 1, "speculative_config", "method"], lambda h: h),
    ("speculative_config.model", ["configurations", 3, "speculative_config", "model"], lambda h: _path(h, "draft")),
    ("extra_args", ["configurations", 0, "extra_args"], lambda h: [h]),
    ("baseline", ["baseline"], lambda h: h),
    ("benchmark.endpoint", ["benchmark", "endpoint"], lambda h: f"/v1/chat/{h}"),
    ("benchmark.dataset_path", ["benchmark", "dataset_path"], lambda h: h),
    ("benchmark.backend", ["benchmark", "backend"], lambda h: h),
    ("equivalence.metric", ["equivalence", "metric"], lambda h: h),
]


def _apply_field(doc, where, setter, h, ctx):
    where = where.split(":")[0]
    if where == "all":
        setter(doc.setdefault("all", {}), h, ctx)
    elif where == "bastion":
        setter(doc.setdefault("bastion", {}), h, ctx)
    else:
        setter(doc["hosts"][where], h, ctx)


def _load_one(doc, tmp: Path, name: str):
    f = tmp / f"inv-{name}.yml"
    f.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return f, load_inventory(f, vars_model=vars_model())  # as the tasks load it: every role's vars typed


def _plan_one(raw, tmp: Path, name: str):
    f = tmp / f"plan-{name}.yml"
    f.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
    return f, parse_plan(yaml.safe_load(f.read_text()), f)


def _canaries(tb) -> list[str]:
    found = [f"bastion:{CANARY}"] if os.path.lexists(CANARY) else []
    for w in tb.workers:
        if host_sh(tb, w, f"test -e {CANARY} || test -L {CANARY}").returncode == 0:
            found.append(f"{w}:{CANARY}")
    return found


def _run_of(where: str) -> str:
    return where.split(":")[1] if ":" in where else "A"


def _inventory_batch(base: dict, h: str, tmp: Path) -> tuple[dict[str, dict], list[str], list[str]]:
    """Per run (A, B, C, D), the testbed inventory with its accepted fields set to `h`; accepted, refused."""
    ctx = {"tmp": tmp, "orig": {"key": base["all"]["key"], "known_hosts": base["all"]["known_hosts"]}}
    accepted, refused = [], []
    docs = {run: copy.deepcopy(base) for run in "ABCD"}
    for name, where, setter in INVENTORY_FIELDS:
        one = copy.deepcopy(base)
        _apply_field(one, where, setter, h, ctx)
        try:
            _load_one(one, tmp, "one")
        except InventoryError as e:
            msg = str(e)
            place = where.split(":")[0]
            who = "bastion" if place == "bastion" else ("host 'w1'" if place == "all" else f"host {place!r}")
            field_ = name.split(".")[0]
            assert "\n" not in msg and msg.startswith(f"{tmp / 'inv-one.yml'}: "), msg
            assert who in msg and (f"field '{field_}" in msg or f"field 'vars.{field_}" in msg), (name, msg)
            refused.append(name)
            continue
        accepted.append(name)
        _apply_field(docs[_run_of(where)], where, setter, h, ctx)
    for kind in NAME_FIELDS:
        one = copy.deepcopy(base)
        if kind == "host name":
            one["hosts"][h] = one["hosts"].pop("w4")
            one["groups"]["workers"]["hosts"] = [x if x != "w4" else h for x in one["groups"]["workers"]["hosts"]]
        else:
            one["groups"][h] = {"hosts": ["w1"]}
        with pytest.raises(InventoryError) as e:
            _load_one(one, tmp, "one")
        assert "\n" not in str(e.value) and repr(h) in str(e.value), str(e.value)
        refused.append(kind)
    # a pip that cannot install the hostile requirement fails once, fast, not five times with back-off
    docs["B"]["bastion"]["vars"].update(pip_attempts=1, pip_retries=0, pip_timeout=5)
    return docs, accepted, refused


def _plan_batch(h: str, tmp: Path) -> tuple[dict, list[str], list[str]]:
    base = yaml.safe_load(PLAN.read_text())
    accepted, refused = [], []
    raw = copy.deepcopy(base)
    for name, path, make in PLAN_FIELDS:
        one = copy.deepcopy(base)
        _set_plan(path)(one, make(h))
        try:
            _plan_one(one, tmp, "one")
        except PlanError as e:
            msg = str(e)
            assert "\n" not in msg and msg.startswith(f"{tmp / 'plan-one.yml'}: ") and "field" in msg, msg
            refused.append(name)
            continue
        accepted.append(name)
        _set_plan(path)(raw, make(h))
    _plan_one(raw, tmp, "batch")  # accepted one by one, accepted together
    return raw, accepted, refused


def _ran_cleanly(r: subprocess.CompletedProcess, what: str) -> None:
    text = r.stdout + r.stderr
    assert "Traceback" not in text, f"{what} crashed:\n{text[-3000:]}"
    if r.returncode == 1:  # refused when the task starts (e.g. a dataset missing): one line naming the field
        errors = [ln for ln in text.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1 and "field '" in errors[0], f"{what}: exit 1\n{text[-3000:]}"
        return
    assert r.returncode in (0, 2, 4, 6), f"{what}: exit {r.returncode}\n{text[-3000:]}"


@pytest.fixture(scope="module")
def coverage():
    seen: dict[str, set[str]] = {"accepted": set(), "refused": set()}
    yield seen
    shutil.rmtree(HOSTILE_ROOT, ignore_errors=True)  # the bastion's hostile venvs (made by this module)
    # every field was exercised by some hostile string, one way or the other
    names = {n for n, _, _ in INVENTORY_FIELDS} | set(NAME_FIELDS) | {f"plan:{n}" for n, _, _ in PLAN_FIELDS}
    assert names <= seen["accepted"] | seen["refused"]


RUNS = {  # run -> the fab commands it makes (all on the testbed; bench --check reads the plan too).
    # A runs last: the checks below read the files it wrote (D rewrites the default env file)
    "B": [("provision", "--check"), ("provision", "--only", "venv,configs")],
    "C": [("provision", "--check", "--only", "venv")],
    "D": [("provision", "--only", "venv,venv-deploy,env"), ("provision", "--check", "--only", "venv,venv-deploy,env")],
    # `provision` before `--check`: --check before the bastion's first build of a venv path crashes
    # in the rsync step's listing (issue 11.6, a missing bastion venv), whatever the path holds
    "A": [("provision",), ("provision", "--check", "--diff"), ("bench", "--check", "--plan", "{plan}")],
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_hostile_values_are_refused_or_inert(testbed4, tmp_path, kind, coverage):
    tb, h = testbed4, HOSTILE[kind]
    base = yaml.safe_load(inventory_of(tb).read_text())
    docs, accepted, refused = _inventory_batch(base, h, tmp_path)
    raw, plan_ok, plan_refused = _plan_batch(h, tmp_path)
    coverage["accepted"] |= set(accepted) | {f"plan:{n}" for n in plan_ok}
    coverage["refused"] |= set(refused) | {f"plan:{n}" for n in plan_refused}
    plan, _ = _plan_one(raw, tmp_path, "batch")

    # a refused value also fails the CLI: exit 1, one line naming the field, before any host is touched
    first = next((f for f in INVENTORY_FIELDS if f[0] in refused), None)
    if first:
        name, where, setter = first
        one = copy.deepcopy(base)
        _apply_field(one, where, setter, h, {"tmp": tmp_path, "orig": base["all"]})
        bad = tmp_path / "inv-refused.yml"
        bad.write_text(yaml.safe_dump(one, sort_keys=False, allow_unicode=True))
        r = fab("provision", "--check", inventory=bad, runs=tmp_path / "runs-bad")
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
        assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), (r.returncode, lines)
        assert name.split(".")[0] in lines[0], lines

    assert not _canaries(tb)
    outputs = {}
    for run, commands in RUNS.items():
        inv, _ = _load_one(docs[run], tmp_path, f"batch-{run}")
        for args in commands:
            args = tuple(a.format(plan=plan) for a in args)
            r = fab(*args, inventory=inv, runs=tmp_path / "runs", timeout=900)
            what = f"fab {' '.join(args)} (run {run}, {kind})"
            outputs[what] = r.stdout[-4000:]
            _ran_cleanly(r, what)
            assert not _canaries(tb), f"{what} ran a hostile value: {_canaries(tb)}"
    # the values that reached files came back as themselves
    doc = docs["A"]
    if "extra_env.value" in accepted:
        env_file = doc["hosts"]["w1"]["vars"].get("env_file") or doc["all"]["vars"]["env_file"]
        got = tb.exec("w1", ["bash", "-c", 'set -a; . "$1"; printf %s "$SF_HOSTILE"', "sh", env_file])
        assert got.returncode == 0 and got.stdout == h, (got.stdout, got.stderr, h, outputs)
    if "nfs_mount" in accepted:  # mounted at that path, and /etc/fstab names it (libmount reads it back)
        mount = doc["hosts"]["w2"]["vars"]["nfs_mount"]
        mounted = tb.exec("w2", ["findmnt", "-n", "-o", "TARGET", "--mountpoint", mount]).stdout
        fstab = tb.exec("w2", ["findmnt", "--fstab", "-n", "-r", "-o", "TARGET"]).stdout
        assert mounted.strip() == mount, (mount, mounted, outputs)
        assert mount in [t.encode().decode("unicode_escape").encode("latin-1").decode() for t in fstab.split()], fstab
