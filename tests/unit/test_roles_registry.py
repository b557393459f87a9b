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
    spec = SimpleNamespace(to_json=lambda: {"x": 1})   # the run spec: what dump_run_spec writes of it
    got = [s.path for s in _placement(host, plan, spec) if hasattr(s, "path")]
    role = [s.path for s in registry()["configs"].steps(host, apply.Context(datasets=[ds]))]
    assert got[:len(role)] == role
    assert "/srv/sf/runner.pyz" in got


def _inventory(tmp_path, **vars):
    import yaml

    from specfleet.inventory import load_inventory
    from specfleet.roles import vars_model
    (tmp_path / "key").write_text("not a key: never used, the inventory only checks it exists\n")
    doc = {"all": {"user": "root", "key": str(tmp_path / "key"), "known_hosts": str(tmp_path / "kh"),
                   "vars": {"venv_path": "/opt/v", "model_candidates": ["/models/q", "/mnt/share/q"], **vars}},
           "hosts": {"w1": {"address": "127.0.0.1"}}}
    (tmp_path / "inv.yml").write_text(yaml.safe_dump(doc))
    return load_inventory(tmp_path / "inv.yml", vars_model=vars_model())


NFS = {"storage_iface": "ens34", "storage_net": "192.168.160.0/24", "storage_ip": "192.168.160.21",
       "nfs_server": "192.168.160.7", "nfs_export": "/srv/models", "nfs_mount": "/mnt/share"}


def test_every_role_reads_its_vars_as_typed_attributes(tmp_path):
    """Each role's steps and revert read its vars as the attributes of its HostVars model: run on a host
    that sets them, every one is read (a misspelt name would be an AttributeError here)."""
    from specfleet.inventory import HostVars
    inv = _inventory(tmp_path, **NFS)
    host = inv.hosts["w1"]
    ctx = apply.Context(inventory=inv, manifest={"provided": True, "python_version": "3.12", "packages": {}},
                        datasets=[])
    for role in registry().values():
        assert role.vars is None or issubclass(role.vars, HostVars), role.name
        role.steps(host, ctx)
        if role.revert:
            role.revert(host, ctx)
    from specfleet.roles.nfs import NfsVars, fstab_line
    v = NfsVars.of(host)
    assert (v.storage_ip, v.nfs_options) == ("192.168.160.21", "ro,vers=4.2,hard,proto=tcp")  # its default
    assert fstab_line(host) == "192.168.160.7:/srv/models /mnt/share nfs4 ro,vers=4.2,hard,proto=tcp,_netdev,nofail 0 0"
    with pytest.raises(AttributeError):
        v.nfs_srever  # noqa: B018


def test_a_needed_var_read_unset_names_file_host_and_field(tmp_path):
    """A var the role cannot do without (NEEDED) is optional at load (a host without a storage NIC skips
    nfs) and a MissingVar when the role reads it: one line, this host's play fails alone."""
    from specfleet.inventory import MissingVar
    from specfleet.roles.nfs import NfsVars
    inv = _inventory(tmp_path, **{**NFS, "nfs_server": None})
    v = NfsVars.of(inv.hosts["w1"])
    assert v.nfs_mount == "/mnt/share"
    with pytest.raises(MissingVar) as e:
        v.nfs_server  # noqa: B018
    assert str(e.value) == (f"{inv.path}: host 'w1', field 'vars.nfs_server': inventory variable 'nfs_server' is "
                            "not set (set it in the host's, a group's or all's vars)")
    (failed,) = apply.guarded(lambda h: registry()["nfs"].steps(h, apply.Context()))(inv.hosts["w1"])
    assert failed.name == "inventory vars" and "field 'vars.nfs_server'" in failed.message


def test_role_vars_read_where_the_core_loaded_the_inventory_are_checked_there(tmp_path):
    """The core loads an inventory without the roles' model (CoreVars): a role reading its vars there
    checks them then, with the same one line (file, host, field)."""
    from specfleet.inventory import InventoryError, Host
    from specfleet.roles.nvidia import NvidiaVars
    host = Host("w1", "10.0.0.1", "root", 22, None, "/dev/null", False, 5, 5, (), {"nvidia_modules": "nvidia"},
                source="hosts.yml")
    with pytest.raises(InventoryError, match=r"^hosts.yml: host 'w1', field 'vars.nvidia_modules': "):
        NvidiaVars.of(host)
    assert NvidiaVars.of(Host("w1", "10.0.0.1", "root", 22, None, "/dev/null", False, 5, 5, (), {})).nvidia_modules \
        == ["nvidia", "nvidia_uvm", "nvidia_modeset"]
