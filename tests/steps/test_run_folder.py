"""The run folder `fab bench` places is the login user's (issue 37: made through sudo it was root's, and the
runner, started as the login user, could not write its log, lock or state)."""
from __future__ import annotations

import subprocess

import pytest

from specfleet.campaign.remote import RunFolder
from specfleet.facts.runner_state import FolderOwner, FolderOwners
from specfleet.step import StepFailed

WD = "/var/lib/specfleet/campaigns"


def decide(*paths: FolderOwner, foreign: str = "", user: str = "maymust"):
    step = RunFolder(user, WD, "demo", "w1")
    return step, step.decide({"owners": FolderOwners(list(paths), foreign)})


def test_root_owned_folders_and_their_files_are_handed_to_the_login_user():
    root_dir, root_file = FolderOwner("dir", "root", "755"), FolderOwner("file", "root", "644")
    step, changes = decide(root_dir, root_dir, root_dir, root_file, foreign=f"{WD}/demo/w1/runner.log")
    scripts = [c.script for c in changes]
    assert scripts == [f"mkdir -p -- {WD} {WD}/demo {WD}/demo/w1 && chown -- maymust: {WD} {WD}/demo {WD}/demo/w1 "
                       f"&& chmod 0755 -- {WD}/demo {WD}/demo/w1",
                       f"chown -- maymust: {WD}/.specfleet-runner.lock",
                       f"chown -R -- maymust: {WD}/demo/w1"]
    assert step.needs_root  # made as root: the work_dir is under the root-owned specfleet home


def test_folders_the_user_owns_need_nothing_and_absent_ones_are_made():
    mine = FolderOwner("dir", "maymust", "755")
    assert decide(mine, mine, mine, FolderOwner("file", "maymust", "644"))[1] == []
    absent = FolderOwner("absent")
    _, changes = decide(mine, absent, absent, absent)
    assert [c.script for c in changes] == [f"mkdir -p -- {WD}/demo {WD}/demo/w1 && chown -- maymust: {WD}/demo "
                                           f"{WD}/demo/w1 && chmod 0755 -- {WD}/demo {WD}/demo/w1"]


def test_a_work_dir_of_the_users_choosing_keeps_its_mode():
    """bench_work_dir may name the user's own 0700 folder: handed over if need be, its mode left alone."""
    mine = FolderOwner("dir", "maymust", "755")
    assert decide(FolderOwner("dir", "maymust", "700"), mine, mine, FolderOwner("absent"))[1] == []
    _, changes = decide(FolderOwner("dir", "root", "700"), mine, mine, FolderOwner("absent"))
    assert [c.script for c in changes] == [f"mkdir -p -- {WD} && chown -- maymust: {WD}"]
    _, changes = decide(*[FolderOwner("absent")] * 4)  # made here: 0755
    assert changes[0].script.endswith(f"chmod 0755 -- {WD} {WD}/demo {WD}/demo/w1")


def test_a_root_login_keeps_root_owned_folders():
    root_dir = FolderOwner("dir", "root", "755")
    assert decide(root_dir, root_dir, root_dir, FolderOwner("absent"), user="root")[1] == []


def test_a_hostile_user_name_reaches_the_shell_quoted():
    _, changes = decide(*[FolderOwner("absent")] * 4, user="a b;touch /x")
    assert "chown -- 'a b;touch /x:' " in changes[0].script
    assert subprocess.run(["bash", "-n", "-c", changes[0].script]).returncode == 0


@pytest.mark.parametrize("kind", ["link", "file", "other"])
def test_a_run_folder_that_is_not_a_folder_is_refused(kind):
    mine = FolderOwner("dir", "maymust", "755")
    with pytest.raises(StepFailed, match=f"{WD}/demo/w1"):
        decide(mine, mine, FolderOwner(kind), FolderOwner("absent"))
