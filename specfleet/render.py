"""Rendering the files specfleet places on hosts: every one comes from specfleet/templates/."""
from __future__ import annotations

import shlex
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parent / "templates"

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES)),
    undefined=jinja2.StrictUndefined,  # a missing inventory var is an error, not an empty string
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,
)
_env.filters["shquote"] = shlex.quote


def render(name: str, **context) -> str:
    try:
        return _env.get_template(name).render(**context)
    except jinja2.UndefinedError as e:
        raise KeyError(f"template {name}: {e.message}") from None
