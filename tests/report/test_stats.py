import math

import pytest

from specfleet.worker.stats import t_two_sided_p


@pytest.mark.parametrize("t,df", [(12.7062047, 1), (4.30265273, 2), (2.22813885, 10),
                                  (2.04227246, 30), (1.95996398, 1e7)])
def test_t_quantiles_give_p_005(t, df):
    assert t_two_sided_p(t, df) == pytest.approx(0.05, abs=2e-6)


def test_t_extremes():
    assert t_two_sided_p(0.0, 5) == pytest.approx(1.0)
    assert t_two_sided_p(math.inf, 5) == 0.0
    assert t_two_sided_p(3.0, 2.5) < t_two_sided_p(2.0, 2.5)


def test_t_p_at_a_fractional_df_matches_r():
    # R: t.test(c(1,2,3,4), c(3,4,5,6,7)) -> t = -2.6112, df = 6.9808, p-value = 0.03494
    assert t_two_sided_p(-2.6112, 6.9808) == pytest.approx(0.03494, abs=1e-5)

