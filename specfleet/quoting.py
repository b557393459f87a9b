"""The one place that turns values into shell words and file syntax.

A value from an inventory or a plan is data, never code. Everything that puts a value into text
another program parses goes through one function here: shell words (`q`, `join`), env file lines
(`env_line`, read back byte for byte by `sh` and by the runner's parser), fstab fields, YAML scalars,
ssh -o values. Each raises ValueError for what the target syntax cannot hold (a NUL byte anywhere, a
newline in a line-based file); callers turn that into a message naming the field.

Every encoding registers how a value looks inside text it wrote (`ENCODINGS`,
filled by the `@encoding` decorator on each function here, plus the encodings
other layers write: JSON, URLs, Python's repr in error messages). `mask_forms`
gives all of them for one secret, and events.Redactor masks each: a new
encoding cannot be added here without its mask (tests/unit/test_quoting_masks.py
checks that every public function is registered or composed of ones that are).
"""
from __future__ import annotations

import json
import re
import shlex
import urllib.parse
from typing import Callable

# name -> how a value appears *inside* text of that encoding (without the wrapper quotes, so that a
# secret embedded in a larger value, /media/<secret>/x, is found too)
ENCODINGS: dict[str, Callable[[str], str]] = {
    "raw": lambda s: s,
    "json": lambda s: json.dumps(s, ensure_ascii=False)[1:-1],
    "json-ascii": lambda s: json.dumps(s)[1:-1],          # json.dumps' default (the event log's lines)
    "url": lambda s: urllib.parse.quote(s, safe=""),
    "url-path": lambda s: urllib.parse.quote(s),          # '/' kept
    "url-plus": lambda s: urllib.parse.quote_plus(s),     # form encoding: ' ' as '+'
    # error messages name values with {v!r}: inside '...' (\\' escaped) or, in a text holding a ' and
    # no ", inside "..." (' as it is)
    "repr": lambda s: repr(s + "'\"")[1:-4],
    "repr-dq": lambda s: repr(s + "'")[1:-2] if '"' not in s else repr(s + "'\"")[1:-4],
}


def encoding(name: str, inner: Callable[[str], str]):
    """Register `inner` (a value as it appears inside the function's output) under `name`."""
    def register(fn):
        ENCODINGS[name] = inner
        fn.encoding = name
        return fn
    return register


def _forms(text: str) -> set[str]:
    out = set()
    for inner in ENCODINGS.values():
        try:
            out.add(inner(text))
        except ValueError:
            continue  # an encoding that cannot hold it never writes it
    return out


def mask_forms(secret: str) -> set[str]:
    """Every form `secret` takes in any text specfleet writes (for masking): each encoding, and each
    encoding of those, since text that holds an encoded value is itself encoded (a change summary names
    an fstab line with repr: `\\\\040` for a space)."""
    return {f for once in _forms(secret) for f in _forms(once) if f}

ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def _sh_inner(text: str) -> str:
    return text.replace("'", "'\"'\"'")  # shlex.quote's way to close, quote and reopen


@encoding("shell", _sh_inner)
def q(value: object) -> str:
    """One shell word holding exactly `value` (POSIX sh single quotes)."""
    text = str(value)
    if "\0" in text:
        raise ValueError(f"{text!r} holds a NUL byte, which no shell word can carry")
    return shlex.quote(text)


def join(argv: list) -> str:
    """A command line from an argv list, each word quoted."""
    return " ".join(q(a) for a in argv)


def env_key(key: object) -> str:
    """`key` if it can be an environment variable name in sh, else ValueError."""
    if not isinstance(key, str) or not ENV_KEY_RE.match(key):
        raise ValueError(f"{key!r} is not a shell variable name (letters, digits, '_', not starting with a digit)")
    return key


def env_line(key: str, value: object) -> str:
    """`export KEY='value'`: sourcing it sets KEY to exactly `value` (newlines, quotes, `$` included)."""
    return f"export {env_key(key)}={q(value)}"


def env_words(*parts: tuple[str, object]) -> str:
    """One shell word from literal values and variable references, e.g. PATH=<venv>/bin:$PATH.

    `parts` are ("lit", value) or ("var", NAME); literals are single-quoted,
    variables expand inside double quotes: `'/opt/venv/bin'":$PATH"`.
    """
    out = []
    for kind, value in parts:
        if kind == "lit":
            if value != "":
                out.append(q(value))
        elif kind == "var":
            out.append(f'"${{{env_key(value)}}}"')
        else:
            raise ValueError(f"unknown part kind {kind!r}")
    return "".join(out) or "''"


_FSTAB_ESCAPES = {" ": "\\040", "\t": "\\011", "\n": "\\012", "\\": "\\134"}


def _fstab_inner(text: str) -> str:
    return "".join(_FSTAB_ESCAPES.get(c, c) for c in text)


@encoding("fstab", _fstab_inner)
def fstab_field(value: object) -> str:
    """One /etc/fstab field: space, tab, newline and backslash as getmntent's octal escapes."""
    text = str(value)
    if not text or "\0" in text:
        raise ValueError(f"{text!r} cannot be an fstab field (empty or holds a NUL byte)")
    return _fstab_inner(text)


def fstab_line(*fields: object) -> str:
    return " ".join(fstab_field(f) for f in fields)


@encoding("yaml", lambda s: yaml_str(s)[1:-1])
def yaml_str(value: object) -> str:
    """A double-quoted YAML scalar that reads back as the string `value`.

    Not json.dumps: JSON writes astral characters as surrogate pairs, which
    YAML reads as two broken characters. Printable characters stay as they
    are; everything else becomes YAML's \\uXXXX / \\UXXXXXXXX escape.
    """
    out = []
    for c in str(value):
        if c in '"\\':
            out.append("\\" + c)
        elif c.isprintable() and c not in "\u2028\u2029\ufeff":
            out.append(c)
        elif ord(c) < 0x10000:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(f"\\U{ord(c):08x}")
    return '"' + "".join(out) + '"'


def _ssh_inner(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")


@encoding("ssh-option", _ssh_inner)
def ssh_option(name: str, value: object, tokens: str = "") -> str:
    """`Name="value"` for `ssh -o`, quoted for OpenSSH's config-line parser.

    OpenSSH splits option values on whitespace (UserKnownHostsFile takes a list),
    reads backslash escapes inside double quotes, and expands `%` tokens;
    `tokens` (e.g. "%C") is appended unescaped, for the tokens meant as such.
    """
    text = str(value)
    if any(c in text for c in "\0\n\r"):
        raise ValueError(f"{text!r} cannot be an ssh option value (newline or NUL byte)")
    return f'{name}="{_ssh_inner(text)}{tokens}"'
