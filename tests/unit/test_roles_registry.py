"""The role registry: one interface that provision, --only, --revert and the reference read."""
from __future__ import annotations

import pytest
from pydantic import BaseModel

from specfleet.errors import UserError
from specfleet.roles import Role, apply, registry, revertible

BUILT_IN = ["venv", "venv-deploy", "env", "nvidia", "nfs", "network", "model", "configs"]


def test_the_built_in_roles_in_provision_order():
    assert list(registry()) == BUILT_IN
    assert revertible() == ["venv-deploy", "env", "nvidia", "nfs", "configs"]
    assert {n for n, r in registry().items() if "manifest" in r.needs} == {"venv", "venv-deploy", "env"}
    assert registry()["configs"].needs == {"datasets"}


def test_only_keeps_the_registry_order_and_names_unknown_roles():
    assert [r.name for r in apply.select("configs,nvidia")] == ["nvidia", "configs"]
    assert [r.name for r in apply.select(None)] == BUILT_IN
    with pytest.raises(UserError, match=r"unknown role\(s\) nosuch \(roles: venv, venv-deploy, env"):
        apply.select("nvidia,nosuch")
    with pytest.raises(UserError, match="--revert takes one of venv-deploy, env, nvidia, nfs, configs"):
        apply.revert_role("model")


def test_each_var_is_declared_once_and_a_read_var_somewhere():
    from specfleet.roles import assemble
    steps = lambda host, ctx: []  # noqa: E731
    with pytest.raises(ValueError, match=r"reads \['no_such_var'\], which nothing declares"):
        assemble([*registry().values(), Role("x", "x", steps, reads=("no_such_var",))])

    class Mine(BaseModel):
        venv_path: str | None = None  # the venv role's

    with pytest.raises(ValueError, match="'venv_path' is already declared by role venv"):
        assemble([*registry().values(), Role("x", "x", steps, vars=Mine)])

    class Core(BaseModel):
        gpu_index: int = 0  # the core's

    with pytest.raises(ValueError, match="already declared by specfleet.inventory.CoreVars"):
        assemble([Role("x", "x", steps, vars=Core)])
    with pytest.raises(ValueError, match="needs"):
        Role("x", "x", steps, needs=frozenset({"gpu"}))


def test_every_var_a_role_reads_is_declared_with_its_type_and_default():
    from specfleet.roles import vars_model
    from specfleet.roles.nfs import NfsVars
    model = vars_model()
    for role in registry().values():
        assert set(role.var_names) <= set(model.model_fields), role.name
    assert model.model_fields["nfs_options"].default == NfsVars.model_fields["nfs_options"].default


def test_bench_places_the_configs_roles_files(tmp_path):
    """`fab bench` places the runner through the configs role, not a copy of its steps."""
    from types import SimpleNamespace

    from specfleet.inventory import Host
    from specfleet.backend.ssh import placement_steps as _placement

    host = Host("w1", "10.0.0.1", "root", 22, None, "/dev/null", False, 5, 5, (),
                {"specfleet_home": "/srv/sf"})
    ds = tmp_path / "q.jsonl"
    ds.write_text('{"turns": ["hi"]}\n')
    plan = SimpleNamespace(campaign="c1", benchmark=SimpleNamespace(on_worker=None), dataset_file=lambda: ds)
    got = [s.path for s in _placement(host, plan, {"x": 1}) if hasattr(s, "path")]
    role = [s.path for s in registry()["configs"].steps(host, apply.Context(datasets=[ds]))]
    assert got[:len(role)] == role
    assert "/srv/sf/runner.pyz" in got
