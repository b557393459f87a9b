"""Rendering templates: the files specfleet places on hosts (templates/provision/) and the report's
pages and `fab compare`'s (templates/report/, templates/compare/: specfleet.report.render.document.page_environments)
come from Jinja environments made here only."""
from __future__ import annotations

import shlex
from pathlib import Path

import jinja2

from . import templates

TEMPLATES = Path(templates.__file__).resolve().parent


def environment(folder: Path = TEMPLATES, *, autoescape=False, keep_trailing_newline: bool = True) -> jinja2.Environment:
    """A Jinja environment over `folder`: a missing variable is an error, not an empty string;
    block tags leave no blank lines; `shquote` quotes a value for sh."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=keep_trailing_newline,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=autoescape,
    )
    env.filters["shquote"] = shlex.quote
    return env


_env = environment()


def render(name: str, **context) -> str:
    """A host file from templates/ (the files roles place)."""
    try:
        return _env.get_template(name).render(**context)
    except jinja2.UndefinedError as e:
        raise KeyError(f"template {name}: {e.message}") from None
