"""The suite runs as one pytest process (.ci/run): test files are imported by basename
(rootdir-relative, no packages), so two files of one basename in different folders stop
the whole collection ("import file mismatch"). Each tier passes alone; only this catches it."""
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_files_share_a_basename():
    where = defaultdict(list)
    for f in TESTS.rglob("test_*.py"):
        if "fixtures" not in f.parts:
            where[f.name].append(str(f.relative_to(TESTS)))
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
