"""report.html in a real browser: Debian's chromium renders it headless, offline, without console
errors, and the screenshot shows the stamps, the tables and the plots (pixels are counted, not
guessed from the HTML). The browser tests are skipped when chromium is not installed (`apt-get install chromium`)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from matplotlib import image as mpimg

from specfleet.report import report_campaign

from campaign_builder import write_campaign

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian package `chromium`)")

WIDTH, HEIGHT = 1280, 3200  # conclusions and plots fill the first ~2000 px; the tables follow
# matplotlib's default colour cycle (the bars of the first three series) and the stamp's red
TAB_BLUE, TAB_ORANGE, TAB_GREEN = (31, 119, 180), (255, 127, 14), (44, 160, 44)
STAMP_RED = (176, 0, 32)


def screenshot(html, tmp_path):
    png = tmp_path / "report.png"
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}", f"--window-size={WIDTH},{HEIGHT}",
            "--enable-logging=stderr", "--v=0", html.as_uri()]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and png.is_file(), p.stderr[-3000:]
    return png, p.stderr


def page_lines(log: str) -> list[str]:
    """The log lines that can concern the page: all but those whose source is Chromium's own UI."""
    return [ln for ln in log.splitlines() if "source: chrome://" not in ln]


def rgb(png) -> np.ndarray:
    img = mpimg.imread(png)  # floats in 0..1, RGB or RGBA
    assert img.shape[:2] == (HEIGHT, WIDTH), img.shape
    return np.rint(img[:, :, :3] * 255).astype(int)


def pixels_near(img: np.ndarray, colour, tol: int = 12) -> int:
    return int((np.abs(img - np.array(colour)).max(axis=2) <= tol).sum())


@needs_chromium
def test_report_renders_with_tables_plots_and_stamps(tmp_path):
    root = write_campaign(tmp_path / "results" / "c1", scale={"w2": 0.94},
                          extra={"simulated": True, "engine": "specfleet-simvllm"})
    out = report_campaign(root, force=True, quiet=True)
    assert out.merged and out.forced and out.simulated

    png, log = screenshot(root / "report.html", tmp_path)
    # no page errors: no script, no resource that failed to load, no console message from the page.
    # Chromium's own pages log too (on a loaded machine: "Slow network is detected ... source:
    # chrome://resources/..."); those are the browser's, not the report's, so they are set aside.
    bad = [ln for ln in page_lines(log) if "CONSOLE" in ln or "Uncaught" in ln or "net::ERR" in ln]
    assert not bad, "\n".join(bad)

    img = rgb(png)
    total = img.shape[0] * img.shape[1]
    white = int((img.min(axis=2) >= 250).sum())
    assert white < 0.9 * total, f"page is {white / total:.1%} white"
    dark = int((img.max(axis=2) <= 90).sum())  # text of tables, headings, plot labels
    assert dark > 0.01 * total, f"only {dark} dark pixels: no text rendered?"
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 50
    # two stamps (simulated, not equivalent): two full-width red banners at the top
    assert pixels_near(img[:400], STAMP_RED) > 2 * 0.7 * 1100 * 40
    # the plots: bars in at least three series colours (speedup: ngram, ngram_improved, eagle3)
    for name, colour in (("blue", TAB_BLUE), ("orange", TAB_ORANGE), ("green", TAB_GREEN)):
        assert pixels_near(img, colour) > 2000, f"no {name} plot bars in the screenshot"
    # the tables: header cells (#f3f3f3) and borders (#ccc) in quantity
    assert pixels_near(img, (243, 243, 243), tol=2) > 20000
    assert pixels_near(img, (204, 204, 204), tol=2) > 5000


@needs_chromium
def test_unstamped_report_has_no_banner(tmp_path):
    root = write_campaign(tmp_path / "results" / "c1")
    assert report_campaign(root, quiet=True).merged
    png, _ = screenshot(root / "report.html", tmp_path)
    assert pixels_near(rgb(png)[:400], STAMP_RED) < 100


def test_page_lines_sets_aside_only_the_browsers_own_console():
    own = ('[1:1:1202/201224.032571:INFO:CONSOLE:574] "Slow network is detected.", '
           'source: chrome://resources/cr_components/composebox/composebox_input.js (574)')
    page = '[1:1:1202/201224.1:INFO:CONSOLE:3] "boom", source: file:///tmp/report.html (3)'
    uncaught = "Uncaught ReferenceError: x is not defined"
    assert page_lines("\n".join([own, page, uncaught])) == [page, uncaught]
