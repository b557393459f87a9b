"""The self-test's verdicts and its n-gram reference (the GPU parts run only on the device)."""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "testbed" / "realgpu"))
import selftest  # noqa: E402


def test_verdict_needs_checks_and_no_failure():
    c = selftest.Checks()
    assert c.verdict(1.0)[0] == 1                      # nothing checked is no pass
    assert c.record("a", 1e-3) and c.verdict(1.0) == (0, "selftest PASSED in 1.0s")
    assert not c.record("b", 3e-2)                     # over the 2e-2 tolerance
    assert not c.record("c", math.nan)
    assert not c.record("d", 1e-9, finite=False)
    rc, line = c.verdict(2.0)
    assert rc == 1 and line == "selftest FAILED: b, c, d in 2.0s"


def test_equal_check():
    c = selftest.Checks()
    assert c.equal("x", [1, 2], [1, 2]) and not c.equal("y", [1], [2])
    assert c.fails == ["y"]


def test_ngram_reference_longest_earliest_match():
    assert selftest.ngram_reference([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3], 2, 5, 4) == [4, 5, 1, 2]
    assert selftest.ngram_reference([7, 8, 9, 10, 11, 12, 20, 21, 9, 10], 2, 4, 3) == [11, 12, 20]
    assert selftest.ngram_reference([5, 6, 7, 8, 9], 2, 4, 3) == []
    # the earliest of two occurrences of the same suffix, k capped by what follows it
    assert selftest.ngram_reference([1, 2, 9, 1, 2, 8, 1, 2], 2, 2, 5) == [9, 1, 2, 8, 1]
    assert selftest.ngram_reference([3, 4, 3, 4], 2, 3, 4) == [3, 4]


def test_device_cases_are_all_checked_against_the_reference():
    assert len(selftest.NGRAM_CASES) >= 3
    assert any(selftest.ngram_reference(*c) == [] for c in selftest.NGRAM_CASES)   # no-match case covered
