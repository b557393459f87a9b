"""Inventory loading: precedence, selection, and one clear error per kind of mistake."""
import textwrap

import pytest

from specfleet.inventory import InventoryError, load_inventory


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
