"""Reading the YAML files people write (inventory, plan): strict, with errors that say where.

Shared by the inventory and the plan: duplicate keys are refused (PyYAML would
silently keep the last one), syntax errors carry line and column, and a
pydantic error becomes one line naming the field.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, ValidationError

from .errors import UserError


class YamlFileError(UserError):
    """A problem in the file, already worded as `<file>: <what>`."""


class _UniqueKeys:
    def construct_mapping(self, node, deep=False):  # PyYAML hook
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise YamlFileError(f"duplicate key {key!r} at line {key_node.start_mark.line + 1} "
                                    f"(first at line {seen[key]})")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


class _UniqueKeyLoader(_UniqueKeys, yaml.SafeLoader):
    pass


# libyaml's parser, where PyYAML has it: ~8x less CPU than the pure-Python one (an 8-host inventory is
# read on every `fab` run). Its error texts differ, so a file it refuses is read again by the
# pure-Python loader, which words the error (same line and column) as it always has.
if yaml.__with_libyaml__:
    class _FastUniqueKeyLoader(_UniqueKeys, yaml.CSafeLoader):
        pass
else:
    _FastUniqueKeyLoader = None


def load_yaml(file: Path) -> Any:
    try:
        text = file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlFileError(f"{file}: not a text file (byte {e.start} is not UTF-8): "
                            "is this the YAML file you meant?") from None
    except OSError as e:
        raise YamlFileError(f"{file}: cannot read it: {e.strerror or e}") from None
    for loader in filter(None, (_FastUniqueKeyLoader, _UniqueKeyLoader)):
        try:
            return yaml.load(text, Loader=loader)
        except YamlFileError as e:
            raise YamlFileError(f"{file}: {e}") from None
        except yaml.YAMLError as e:
            if loader is _FastUniqueKeyLoader:
                continue  # worded by the pure-Python loader
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = (getattr(e, "problem", None) or str(e)).splitlines()[0]  # one line (a ReaderError has 2)
            raise YamlFileError(f"{file}: YAML syntax error{where}: {problem}") from None


def matching(rx: re.Pattern, what: str) -> Any:
    """A field type: a string `rx` matches, else the error "'<value>' is not <what>"."""
    def check(v: str) -> str:
        if not rx.fullmatch(v):   # the whole string: a pattern ending in `$` would let "name\n" through
            raise ValueError(f"{v!r} is not {what}")
        return v
    return Annotated[str, AfterValidator(check)]


def first_error(e: ValidationError) -> tuple[tuple, str]:
    """The error to show, and its message in plain words.

    A misspelt field also makes the right one 'missing': the misspelling is named first.
    """
    err = sorted(e.errors(), key=lambda x: x["type"] != "extra_forbidden")[0]
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif err["type"] == "missing":
        msg = "is required"
    return tuple(err["loc"]), msg
