from pathlib import Path

import pytest

from campaign_builder import write_campaign


@pytest.fixture
def campaign(tmp_path) -> Path:
    """The field report's two-node campaign (w1: n-gram configs, w2: eagle3)."""
    return write_campaign(tmp_path / "results" / "c1")
