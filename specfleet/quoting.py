"""The one place that turns values into shell words and file syntax.

A value from an inventory or a plan is data, never code. Everything that puts
a value into text another program parses goes through one function here:

- shell words (`q`, `join`): POSIX sh single quoting (shlex.quote);
- env file lines (`env_line`): `export KEY='value'`, KEY an identifier, read
  back byte for byte by `sh`/`bash` when sourced and by the runner's parser;
- fstab fields (`fstab_field`): octal escapes (`\\040` for a space), as
  getmntent(3) reads them;
- YAML scalars (`yaml_str`): a JSON string, which YAML reads as the same string;
- ssh -o values (`ssh_option`): OpenSSH's own config-line quoting ("..."
  with backslash escapes, `%%` for a literal `%`), so a known_hosts path with
  a space stays one path.

Each raises ValueError for what the target syntax cannot hold (a NUL byte
anywhere, a newline in a line-based file); callers turn that into a message
naming the field.
"""
from __future__ import annotations

import re
import shlex

ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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


def fstab_field(value: object) -> str:
    """One /etc/fstab field: space, tab, newline and backslash as getmntent's octal escapes."""
    text = str(value)
    if not text or "\0" in text:
        raise ValueError(f"{text!r} cannot be an fstab field (empty or holds a NUL byte)")
    return "".join(_FSTAB_ESCAPES.get(c, c) for c in text)


def fstab_line(*fields: object) -> str:
    return " ".join(fstab_field(f) for f in fields)


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


def ssh_option(name: str, value: object, tokens: str = "") -> str:
    """`Name="value"` for `ssh -o`, quoted for OpenSSH's config-line parser.

    OpenSSH splits option values on whitespace (UserKnownHostsFile takes a list),
    reads backslash escapes inside double quotes, and expands `%` tokens;
    `tokens` (e.g. "%C") is appended unescaped, for the tokens meant as such.
    """
    text = str(value)
    if any(c in text for c in "\0\n\r"):
        raise ValueError(f"{text!r} cannot be an ssh option value (newline or NUL byte)")
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'{name}="{escaped}{tokens}"'
