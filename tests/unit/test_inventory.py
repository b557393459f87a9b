"""Inventory loading: precedence, selection, and one clear error per kind of mistake."""
import textwrap

import pytest

from specfleet.inventory import InventoryError, load_inventory as load_core
from specfleet.roles import vars_model


def load_inventory(path):
    """As the tasks load it (tasks/common.py): the core's vars and every role's, with their defaults."""
    return load_core(path, vars_model=vars_model())


def write(tmp_path, text, name="hosts.yml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


@pytest.fixture
def key(tmp_path):
    k = tmp_path / "id_test"
    k.write_text("not really a key")
    return k


GOOD = """
all:
  user: maymust
  key: {key}
  vars: {{venv_path: /vllm-venv, gpu_arch: sm_90, level: all}}
hosts:
  w1: {{address: 10.10.30.14, vars: {{storage_ip: 192.168.160.179, level: host}}}}
  w2: {{address: 10.10.30.15, port: 2222}}
  nfs: {{address: storage.example.org}}
groups:
  workers:
    hosts: [w1, w2]
    user: root
    vars: {{gpu_arch: sm_120, level: group}}
"""


def test_precedence_host_over_group_over_all(tmp_path, key):
    inv = load_inventory(write(tmp_path, GOOD.format(key=key)))
    w1, w2, nfs = inv.hosts["w1"], inv.hosts["w2"], inv.hosts["nfs"]
    assert w1.vars["level"] == "host" and w2.vars["level"] == "group" and nfs.vars["level"] == "all"
    assert w1.vars["gpu_arch"] == "sm_120" and nfs.vars["gpu_arch"] == "sm_90"
    assert w1.vars["venv_path"] == "/vllm-venv"
    assert w1.user == "root" and nfs.user == "maymust"
    assert w2.port == 2222 and w1.port == 22
    assert w1.key == str(key)


def test_select_hosts_and_groups(tmp_path, key):
    inv = load_inventory(write(tmp_path, GOOD.format(key=key)))
    assert [h.name for h in inv.select("workers")] == ["w1", "w2"]
    assert [h.name for h in inv.select("w2,workers")] == ["w2", "w1"]
    assert len(inv.select(None)) == 3
    with pytest.raises(InventoryError, match="'w9'"):
        inv.select("w1,w9")


def test_env_variable_names_the_default(tmp_path, key, monkeypatch):
    p = write(tmp_path, GOOD.format(key=key), "other.yml")
    monkeypatch.setenv("SPECFLEET_INVENTORY", str(p))
    assert load_inventory(None).path == p


@pytest.mark.parametrize(
    "text, expected",
    [
        ("hosts:\n  w1: {address: 10.10.30.14}\ngroups:\n  workers: {hosts: [w1, w3]}\n",
         ["group 'workers'", "field 'hosts'", "unknown host 'w3'"]),
        ("hosts:\n  w1: {address: 10.10.30.14}\n  w1: {address: 10.10.30.15}\n",
         ["duplicate key 'w1'", "line 3"]),
        ("hosts:\n  w1: {address: 10.10.30.14}\n  w2: {address: 10.10.30.14}\n",
         ["host 'w2'", "field 'address'", "duplicate host"]),
        ("hosts:\n  w1: {address: 10.10.30.300}\n",
         ["host 'w1'", "field 'address'", "not a valid IPv4 address"]),
        ("hosts:\n  w1: {address: 'bad host!'}\n",
         ["host 'w1'", "field 'address'"]),
        ("hosts:\n  w1: {address: 10.10.30.14, key: /nonexistent/id_rsa}\n",
         ["host 'w1'", "field 'key'", "/nonexistent/id_rsa", "does not exist"]),
        ("hosts:\n  w1: {address: 10.10.30.14, adress: x}\n",
         ["host 'w1'", "field 'adress'", "unknown field"]),
        ("hosts:\n  w1: {address: 10.10.30.14, port: 70000}\n",
         ["host 'w1'", "field 'port'"]),
        ("hosts:\n  w1: {address: 10.10.30.14\n", ["YAML syntax error", "line"]),
        ("hosts:\n  w1: {}\n", ["host 'w1'", "field 'address'", "is required"]),
        ("hosts:\n  'w1; rm -rf /': {address: 10.10.30.14}\n", ["host 'w1; rm -rf /'", "host name"]),
        ("hostz:\n  w1: {address: 10.10.30.14}\n", ["field 'hostz'"]),
        # YAML 1.2 reads "yes" as a string: a string is not a boolean (pydantic's lax mode took it as true)
        ("hosts:\n  w1: {address: 10.10.30.14, become: 'yes'}\n", ["host 'w1'", "field 'become'", "boolean"]),
        ("all: {become: 'no'}\nhosts:\n  w1: {address: 10.10.30.14}\n", ["field 'all.become'", "boolean"]),
        ("hosts:\n  w1: {address: 10.10.30.14, become: 1}\n", ["host 'w1'", "field 'become'", "boolean"]),
    ],
)
def test_bad_inventory_gives_one_clear_error(tmp_path, text, expected):
    p = write(tmp_path, text)
    with pytest.raises(InventoryError) as e:
        load_inventory(p)
    msg = str(e.value)
    assert msg.startswith(str(p)), msg
    for part in expected:
        assert part in msg, (part, msg)
    assert "\n" not in msg


def test_missing_file_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPECFLEET_INVENTORY", raising=False)
    with pytest.raises(InventoryError, match="testbed.up"):
        load_inventory(None)


def test_secrets_are_collected_for_masking(tmp_path):
    p = write(tmp_path, "all:\n  vars: {hf_token: hf_abcdef123, plain: visible}\nhosts:\n  w1: {address: 10.1.1.1}\n")
    inv = load_inventory(p)
    assert inv.secrets() == ["hf_abcdef123"]


def test_shipped_example_inventory_loads():
    from pathlib import Path
    example = Path(__file__).resolve().parents[2] / "inventory" / "example.yml"
    inv = load_inventory(example)
    assert inv.hosts["w1"].address == "10.10.30.14" and inv.hosts["w2"].address == "10.10.30.15"
    assert inv.hosts["w1"].vars["storage_iface"] == "ens35"
    assert inv.hosts["w1"].vars["nfs_server"] == "192.168.160.7"


# -- types of the vars roles read (issue 11.5) ------------------------------------------------------
TYPED = """
all:
  vars: {{venv_path: /opt/v, {var}}}
hosts:
  w1: {{address: 10.10.30.14}}
"""


@pytest.mark.parametrize("var, field, says", [
    ("nvidia_modules: nvidia", "vars.nvidia_modules", "valid list, not 'nvidia'"),
    ("model_candidates: /mnt/fabrix/models/Qwen3-32B", "vars.model_candidates", "valid list"),
    ("model_candidates: [models/Qwen3-32B]", "vars.model_candidates.0", "not an absolute path"),
    ("model_candidates: ['-rf']", "vars.model_candidates.0", "not an absolute path"),
    ("model_candidates: [\"/mnt/a\\nb\"]", "vars.model_candidates.0", "newline"),
    ("extra_env: {'X=1; touch /tmp/pwned; Y': 1}", "vars.extra_env.X=1; touch /tmp/pwned; Y.[key]", "variable name"),
    ("extra_env: [A]", "vars.extra_env", "valid dictionary"),
    ("base_python: /usr/bin/my python", "vars.base_python", "whitespace"),
    ("storage_iface: 'ens35; reboot'", "vars.storage_iface", "interface name"),
    ("storage_ip: 192.168.160.300", "vars.storage_ip", "IPv4 address"),
    ("storage_net: '$(touch x)'", "vars.storage_net", "IPv4 network"),
    ("nfs_options: 'ro,$(touch x)'", "vars.nfs_options", "mount options"),
    ("gpu_index: '0'", "vars.gpu_index", "valid integer"),
    ("model_source: disk", "vars.model_source", "'local' or 'nfs'"),
    ("cuda_subdir: /usr/local/cuda", "vars.cuda_subdir", "relative path"),
    ("venv_requirements: ['--index-url=http://x']", "vars.venv_requirements.0", "starts with '-'"),
])
def test_var_types_are_checked_at_load(tmp_path, var, field, says):
    with pytest.raises(InventoryError) as e:
        load_inventory(write(tmp_path, TYPED.format(var=var)))
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'hosts.yml'}: ") and "\n" not in msg
    assert f"field {field!r}" in msg and says in msg, msg
    assert "host 'w1'" in msg or "bastion" in msg, msg


def test_var_error_says_where_the_value_was_set(tmp_path):
    text = """
    hosts:
      w1: {address: 10.10.30.14}
    groups:
      workers: {hosts: [w1], vars: {nvidia_modules: nvidia}}
    """
    with pytest.raises(InventoryError, match=r"host 'w1', field 'vars.nvidia_modules' \(set in group 'workers'.vars\)"):
        load_inventory(write(tmp_path, text))


def test_well_typed_vars_and_own_vars_load(tmp_path):
    inv = load_inventory(write(tmp_path, TYPED.format(
        var="nvidia_modules: [nvidia], gpu_memory_bandwidth_gbps: 1792, my_own_var: {any: [thing]}, "
            "extra_env: {HF_HUB_OFFLINE: 1, NAME: 'a b $c'}")))
    assert inv.hosts["w1"].vars["my_own_var"] == {"any": ["thing"]}


def test_a_var_no_layer_sets_has_the_default_its_role_declares(tmp_path):
    """One default, one place: the env file the env role writes is the one fab bench's run spec names
    (tasks/bench.py passes host.var("env_file")), also when the inventory sets none."""
    from specfleet.roles import env
    inv = load_inventory(write(tmp_path, TYPED.format(var="cc: /opt/cc")))
    host = inv.hosts["w1"]
    assert host.var("env_file") == env.EnvVars.model_fields["env_file"].default == "/etc/specfleet/vllm.env"
    assert env.steps(host, "3.11")[0].path == host.var("env_file")
    assert host.var("cc") == "/opt/cc" and host.var("runner_python") == "/usr/bin/python3"
    assert "env_file" in inv.bastion_vars and host.var("gpu_index") is None  # None is "not set": no default
    set_ = load_inventory(write(tmp_path, TYPED.format(var="env_file: /srv/e.env"))).hosts["w1"]
    assert set_.var("env_file") == env.steps(set_, "3.11")[0].path == "/srv/e.env"
    none = load_inventory(write(tmp_path, TYPED.format(var="env_file: null"))).hosts["w1"]
    assert none.var("env_file") is None  # said so: the runner sources no env file (not the default)


def test_the_core_alone_checks_its_own_vars_and_passes_the_roles(tmp_path):
    """The core cannot import the roles (the layer rule): without their model a role's var is the
    user's own, a core var is still checked."""
    inv = load_core(write(tmp_path, TYPED.format(var="nvidia_modules: nvidia")))
    assert inv.hosts["w1"].vars["nvidia_modules"] == "nvidia" and "env_file" not in inv.hosts["w1"].vars
    with pytest.raises(InventoryError, match="field 'vars.gpu_index'"):
        load_core(write(tmp_path, TYPED.format(var="gpu_index: '0'")))


def test_secret_values_at_any_depth(tmp_path):
    inv = load_inventory(write(tmp_path, TYPED.format(
        var="db_passphrase: 'pass phrase', extra_env: {HF_TOKEN: hf_abcdef, OTHER: visible}")))
    assert set(inv.secrets()) == {"pass phrase", "hf_abcdef"}


def test_a_missing_var_names_the_inventory_file_host_and_field(tmp_path, key):
    from specfleet.inventory import MissingVar
    f = write(tmp_path, GOOD.format(key=key))
    inv = load_inventory(f)
    with pytest.raises(MissingVar) as e:
        inv.hosts["w2"].require("storage_ip")
    msg = str(e.value)
    assert msg.startswith(f"{inv.path}: host 'w2', field 'vars.storage_ip': ") and "\n" not in msg, msg
    assert inv.hosts["w1"].require("storage_ip") == "192.168.160.179"


def test_the_bastion_venv_vars_missing_name_the_file_and_fields(tmp_path):
    from specfleet.roles.venv import venv_spec
    from specfleet.venv_build import VenvError
    with pytest.raises(VenvError) as e:
        venv_spec({"venv_path": "/opt/v"}, where=f"{tmp_path}/hosts.yml: bastion")
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path}/hosts.yml: bastion, field(s) 'base_python', 'venv_requirements': "), msg
