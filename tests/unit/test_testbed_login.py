"""The testbed's login user (issue 37): its ids never collide with the machine's, its inventory is non-root."""
from __future__ import annotations

import yaml

from testbed import seed


def test_the_login_ids_are_free_in_the_machines_passwd_and_group():
    passwd = "root:x:0:0::/root:/bin/bash\nsomeone:x:2037:2037::/home/someone:/bin/sh\n"
    group = "root:x:0:\nstaff:x:2038:\n"
    assert seed.login_ids(passwd, group) == 2039
    assert seed.login_ids("root:x:0:0::/root:/bin/bash\n", "") == seed.LOGIN_UID


def test_the_inventory_logs_in_as_maymust_with_become_or_as_root(tmp_path):
    (tmp_path / "client").mkdir()
    doc = yaml.safe_load(seed.inventory(tmp_path / "inv.yml", tmp_path, ["w1"]).read_text())
    assert (doc["all"]["user"], doc["all"]["become"]) == ("maymust", True)
    doc = yaml.safe_load(seed.inventory(tmp_path / "inv.yml", tmp_path, ["w1"], login="root").read_text())
    assert doc["all"]["user"] == "root" and "become" not in doc["all"]
