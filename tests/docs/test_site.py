"""The handbook site builds in strict mode and loads nothing from outside (it is read offline).

Needs mkdocs (docs/requirements.txt, the project's `docs` extra); skipped without it.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"

# attributes and CSS that make a browser fetch something; comments and messages with URLs in
# bundled JS and CSS licence headers are text, not loads
LOADS = [
    re.compile(r"""\b(?:src|href|srcset|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//""", re.I),
    re.compile(r"""url\(\s*["']?\s*(?:https?:)?//""", re.I),
    re.compile(r"""@import\s+["']\s*(?:https?:)?//""", re.I),
    re.compile(r"""importScripts\(\s*["'](?:https?:)?//""", re.I),
]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if not MKDOCS.exists():
        pytest.skip("mkdocs is not installed (pip install -r docs/requirements.txt)")
    out = tmp_path_factory.mktemp("site")
    p = subprocess.run([str(MKDOCS), "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr  # a broken link, anchor or a page missing from nav
    return out


def test_every_page_is_built(site):
    docs = {p.relative_to(ROOT / "docs").with_suffix(".html")
            for p in (ROOT / "docs").rglob("*.md")}
    built = {p.relative_to(site) for p in site.rglob("*.html")}
    assert docs <= built, sorted(map(str, docs - built))


def test_nothing_is_loaded_from_outside(site):
    offenders = []
    for f in site.rglob("*"):
        if f.suffix not in (".html", ".css", ".js"):
            continue
        text = f.read_text(errors="replace")
        for rx in LOADS:
            for m in rx.finditer(text):
                offenders.append(f"{f.relative_to(site)}: {text[max(0, m.start() - 40):m.end() + 60]!r}")
    assert not offenders, "\n".join(offenders[:20])


def test_pages_link_as_files_so_the_site_opens_from_disk(site):
    index = (site / "index.html").read_text()
    assert 'href="troubleshooting.html"' in index
    assert 'href="bastion.html"' in index
