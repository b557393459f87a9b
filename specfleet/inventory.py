"""The inventory: which hosts exist, how to reach them, and their variables (docs/inventory.md).

YAML in an Ansible-like shape (all, hosts, groups, bastion), validated with pydantic. Precedence of
settings and variables: host > group (in the order the groups are listed) > all. Every problem is
reported as one InventoryError naming the file, the host (or group) and the field, before anything
touches a host.
"""
from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar, Literal, Mapping, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, ValidationError

from .errors import UserError
from .quoting import env_key
from .scheduler import Scheduler
from .yamlfile import YamlFileError, first_error, load_yaml, matching

DEFAULT_INVENTORY = "inventory/hosts.yml"
INVENTORY_ENV = "SPECFLEET_INVENTORY"

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")
HOSTNAME_RE = re.compile(
    r"^(?=.{1,253}\Z)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\Z"
)
# Variable names that hold secrets: their values are masked in every output (docs/security.md).
SECRET_VAR_RE = re.compile(r"(password|passwd|passphrase|token|secret)", re.IGNORECASE)
USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}\Z")
IFACE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}\Z")  # Linux IFNAMSIZ: 15 characters
WORD_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z")
PY_MINOR_RE = re.compile(r"^3\.[0-9]+\Z")
MOUNT_OPTIONS_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_=.,:/+-]*\Z")
PY_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class InventoryError(UserError):
    """A bad inventory: one message naming file, host and field."""


class MissingVar(InventoryError, KeyError):
    """A host lacks a variable that a role or task needs (a KeyError too, for older callers)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def _parsed_as(parse: Callable[[str], object], what: str) -> Callable[[str], str]:
    """A validator: the value as `parse` (an ipaddress class) writes it, else "'<value>' is not <what>"."""
    def check(v: str) -> str:
        try:
            return str(parse(v))
        except ValueError:
            raise ValueError(f"{v!r} is not {what}") from None
    return check


def check_address(value: str) -> str:
    value = str(value).strip()
    if re.fullmatch(r"[0-9.]+", value):
        return _parsed_as(ipaddress.IPv4Address, "a valid IPv4 address")(value)
    if not HOSTNAME_RE.match(value):
        raise ValueError(f"{value!r} is not a valid IPv4 address or host name")
    return value


def _text(v: str) -> str:
    if "\0" in v:
        raise ValueError("holds a NUL byte")
    return v


def _line(v: str) -> str:
    """A value that lands in a line-based file or a probe's line output: one line."""
    if any(ord(c) < 32 and c != "\t" or c == "\x7f" for c in _text(v)):
        raise ValueError(f"{v!r} holds a newline or control character")
    return v


def _abs_path(v: str) -> str:
    if not _line(v).startswith("/"):
        raise ValueError(f"{v!r} is not an absolute path")
    return v


def _exec_path(v: str) -> str:
    """A path written into #! lines (venv scripts, pyvenv.cfg): the kernel splits those at whitespace."""
    if any(c.isspace() for c in _abs_path(v)):
        raise ValueError(f"{v!r} holds whitespace, which a script's #! line cannot hold")
    return v


def _rel_path(v: str) -> str:
    if _line(v).startswith("/") or ".." in v.split("/") or not v:
        raise ValueError(f"{v!r} must be a relative path inside the venv (no leading '/', no '..')")
    return v


def _not_option(v: str) -> str:
    if _line(v).startswith("-"):
        raise ValueError(f"{v!r} starts with '-' (an option, not a value)")
    return v


Text = Annotated[str, AfterValidator(_text)]
AbsPath = Annotated[str, AfterValidator(_abs_path)]
ExecPath = Annotated[str, AfterValidator(_exec_path)]
RelPath = Annotated[str, AfterValidator(_rel_path)]
Iface = matching(IFACE_RE, "a network interface name (up to 15 letters, digits, '_', '.', '-')")
Word = matching(WORD_RE, "one word (letters, digits, '_', '.', '+', '-')")
ModuleName = matching(re.compile(r"^[A-Za-z0-9_-]+\Z"), "a kernel module name")
PyModule = matching(PY_MODULE_RE, "a Python module name")
EnvKey = Annotated[str, AfterValidator(env_key)]
Requirement = Annotated[str, AfterValidator(_not_option)]
Line = Annotated[str, AfterValidator(_line)]
Ipv4Net = Annotated[str, AfterValidator(_parsed_as(ipaddress.IPv4Network, "an IPv4 network such as 192.168.160.0/24"))]
Ipv4 = Annotated[str, AfterValidator(_parsed_as(ipaddress.IPv4Address, "an IPv4 address"))]
Address = Annotated[str, AfterValidator(check_address)]
MountOptions = matching(MOUNT_OPTIONS_RE, "mount options (a comma list such as ro,vers=4.2)")
PyMinor = matching(PY_MINOR_RE, "a Python minor version such as 3.12")
Login = matching(USER_RE, "a login name (letters, digits, '_', '.', '-')")


def not_set(source: str | os.PathLike, who: str, name: str) -> MissingVar:
    """The one line for a variable a reader needs and `who` (host 'w1', bastion) does not set."""
    where = "the bastion's or all's" if who == "bastion" else "the host's, a group's or all's"
    return MissingVar(f"{source}: {who}, field 'vars.{name}': inventory variable {name!r} is not set "
                      f"(set it in {where} vars)")


class Needed:
    """Marks a var its model's readers cannot do without (`Annotated[Iface | None, NEEDED]`): optional at
    load (a host that skips the role leaves it out); read unset (None or ""), it is a MissingVar naming
    file, host and field."""

    def __repr__(self) -> str:
        return "NEEDED"


NEEDED = Needed()


class HostVars(BaseModel):
    """A vars model whose readers take its values as typed attributes: `NfsVars.of(host).nfs_mount`, not
    a string looked up at run time; a misspelt name is an AttributeError in the first test that runs it.
    The values are the host's after precedence, checked by the model (strictly, as at load); a NEEDED
    one read unset raises MissingVar (`not_set`), as `Host.require` does."""

    model_config = ConfigDict(strict=True)
    _needed: ClassVar[frozenset[str]] = frozenset()
    _where: tuple[str, str] = PrivateAttr(default=("<inventory>", "host ?"))

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._needed = frozenset(n for n, f in cls.model_fields.items() if NEEDED in f.metadata)

    def __getattribute__(self, name: str) -> Any:
        value = super().__getattribute__(name)
        if name in type(self)._needed and value in (None, ""):
            raise not_set(*self._where, name)
        return value

    @classmethod
    def of(cls, host: Host) -> Self:
        return cls.from_vars(host.vars, host.source, f"host {host.name!r}")

    @classmethod
    def from_vars(cls, vars_: Mapping[str, Any], source: str | os.PathLike, who: str) -> Self:
        """`vars_` (a host's, the bastion's) read through this model; `source` and `who` name them in errors."""
        try:
            v = cls.model_validate({k: vars_[k] for k in cls.model_fields if vars_.get(k) is not None})
        except ValidationError as e:  # the core loaded the inventory without the roles' model (CoreVars)
            loc, msg = first_error(e)
            raise InventoryError(f"{source}: {who}, field {'.'.join(str(p) for p in ('vars', *loc))!r}: {msg}") \
                from None
        v._where = (str(source), who)
        return v


class GpuEntry(BaseModel):
    """One GPU of the `gpus` host var: what nvidia-smi would report, for a host where it cannot
    (or should not: a GPU left out of the campaign). Indexed in list order."""

    model_config = ConfigDict(extra="forbid", strict=True)
    name: Line
    memory_mib: int = Field(gt=0)
    uuid: Word | None = None  # for CUDA_VISIBLE_DEVICES by UUID (GPU-... or MIG-...)


class CoreVars(HostVars):
    """The vars the core and the tasks read themselves (the campaign: GPUs, where the runner works),
    typed here with their defaults. Each role declares its own vars in its module (`Role.vars`);
    `specfleet.roles.vars_model()` adds them all to these: the type and the default of every variable
    (docs/inventory.md), checked when the inventory loads. Variables no model declares are the user's
    own and pass through untouched.
    """

    model_config = ConfigDict(extra="allow", strict=True)
    bench_work_dir: AbsPath | None = None  # None: <specfleet_home>/campaigns (backend/ssh.py: work_dir)
    runner_python: AbsPath = "/usr/bin/python3"
    gpu_index: int | None = Field(default=None, ge=0)
    gpus: list[GpuEntry] | None = Field(default=None, min_length=1)  # overrides `fab facts`' nvidia-smi list
    model_source: Literal["local", "nfs"] | None = None
    model_read_mb_s: float | None = Field(default=None, gt=0)
    gpu_memory_bandwidth_gbps: float | None = Field(default=None, gt=0)
    # GPUs (by `gpus` list index) joined by NVLink/NVSwitch: a server on several GPUs stays inside one
    gpu_groups: list[list[int]] | None = None


def declared_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """The defaults a vars model declares (None is "not set", not a default)."""
    defaults = {name: f.get_default(call_default_factory=True) for name, f in model.model_fields.items()}
    return {name: value for name, value in defaults.items() if value is not None}


class Connectable(BaseModel):
    """Connection settings that all, a group or a host may set."""

    model_config = ConfigDict(extra="forbid")
    user: Login | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    key: Line | None = None
    known_hosts: Line | None = None
    become: StrictBool | None = None  # sudo where a step needs root; true or false, never "yes" (lax mode took it)
    connect_timeout: float | None = Field(default=None, gt=0)
    command_timeout: float | None = Field(default=None, gt=0)
    vars: dict[str, Any] = Field(default_factory=dict)


CONNECTION_FIELDS = set(Connectable.model_fields) - {"vars"}


class HostEntry(Connectable):
    address: Address


class GroupEntry(Connectable):
    hosts: list[str] = Field(default_factory=list)


class BastionEntry(BaseModel):
    """The machine specfleet runs on; it builds the venv the workers get."""

    model_config = ConfigDict(extra="forbid")
    vars: dict[str, Any] = Field(default_factory=dict)


class InventoryFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scheduler: Scheduler | None = None  # specfleet.scheduler: ssh (default) or slurm
    all: Connectable = Field(default_factory=Connectable)
    bastion: BastionEntry = Field(default_factory=BastionEntry)
    hosts: dict[str, HostEntry]
    groups: dict[str, GroupEntry] = Field(default_factory=dict)


@dataclass(frozen=True)
class Host:
    """One resolved host: settings and vars after precedence."""

    name: str
    address: str
    user: str
    port: int
    key: str | None
    known_hosts: str
    become: bool
    connect_timeout: float
    command_timeout: float
    groups: tuple[str, ...]
    vars: dict[str, Any] = field(hash=False, compare=False)
    source: str = field(default="<inventory>", compare=False)  # the inventory file: errors name it

    def var(self, name: str, default: Any = None) -> Any:
        return self.vars.get(name, default)

    def require(self, name: str) -> Any:
        if name not in self.vars or self.vars[name] in (None, ""):
            raise not_set(self.source, f"host {self.name!r}", name)
        return self.vars[name]

    @property
    def needs_sudo(self) -> bool:
        return self.become and self.user != "root"


@dataclass
class Inventory:
    path: Path
    hosts: dict[str, Host]
    groups: dict[str, list[str]]
    bastion_vars: dict[str, Any]
    all_vars: dict[str, Any]
    scheduler: Any = None  # specfleet.scheduler.SlurmScheduler, or None: ssh fan-out

    @property
    def slurm(self):
        """The Slurm scheduler settings, or None when `fab bench` fans out over SSH."""
        return self.scheduler if getattr(self.scheduler, "kind", None) == "slurm" else None

    def select(self, spec: str | None) -> list[Host]:
        """Hosts named by a comma list of host and group names ('all' = every host)."""
        if not spec or spec.strip() == "all":
            return list(self.hosts.values())
        chosen: list[str] = []
        for token in [t.strip() for t in spec.split(",") if t.strip()]:
            if token in self.hosts:
                names = [token]
            elif token in self.groups:
                names = self.groups[token]
            elif token == "all":
                names = list(self.hosts)
            else:
                known = ", ".join(sorted(self.hosts) + sorted(self.groups))
                raise InventoryError(
                    f"{self.path}: --hosts names {token!r}, which is neither a host nor a group "
                    f"(known: {known})"
                )
            chosen += [n for n in names if n not in chosen]
        return [self.hosts[n] for n in chosen]

    def secrets(self) -> list[str]:
        """Values of secret-named vars anywhere in the inventory, for masking."""
        out = []
        for scope in [self.all_vars, self.bastion_vars, *(h.vars for h in self.hosts.values())]:
            out += _secret_values(scope)
        return sorted(set(out), key=len, reverse=True)


def _secret_values(value: Any, secret: bool = False) -> list[str]:
    """Values under a secret-named key, at any depth (extra_env: {HF_TOKEN: ...} included)."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _secret_values(v, secret or bool(SECRET_VAR_RE.search(str(k))))]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _secret_values(v, secret)]
    if not secret or value in (None, "") or isinstance(value, bool):
        return []
    return [str(value)]


def _where(loc: tuple, file: Path) -> str:
    """Turn a pydantic error location into 'host 'w1', field 'address''."""
    parts = list(loc)
    if len(parts) >= 2 and parts[0] == "scheduler" and parts[1] in ("ssh", "slurm"):
        parts.pop(1)  # the union's tag (kind), not a field the file has
    if len(parts) >= 2 and parts[0] in ("hosts", "groups"):
        kind = "host" if parts[0] == "hosts" else "group"
        field_ = ".".join(str(p) for p in parts[2:]) or "(entry)"
        return f"{file}: {kind} {parts[1]!r}, field {field_!r}"
    return f"{file}: field {'.'.join(str(p) for p in parts)!r}"


def load_inventory(path: str | os.PathLike | None = None, vars_model: type[BaseModel] = CoreVars) -> Inventory:
    """The inventory at `path`, every host's and the bastion's vars checked against `vars_model` and its
    defaults filled in. The tasks pass `specfleet.roles.vars_model()` (the core's vars and every
    role's); the core alone knows only its own (`CoreVars`)."""
    file = Path(path or os.environ.get(INVENTORY_ENV) or DEFAULT_INVENTORY)
    if not file.is_file():
        hint = ""
        if str(file) == DEFAULT_INVENTORY:
            hint = (
                f" (pass --inventory PATH or set {INVENTORY_ENV}; "
                "`fab testbed.up` writes inventory/testbed.yml, inventory/example.yml shows the format)"
            )
        raise InventoryError(f"{file}: inventory file not found{hint}")
    try:
        raw = load_yaml(file)
    except YamlFileError as e:
        raise InventoryError(str(e)) from None
    if not isinstance(raw, dict):
        raise InventoryError(f"{file}: expected a mapping with 'hosts:' at the top level")
    try:
        doc = InventoryFile.model_validate(raw)
    except ValidationError as e:
        loc, msg = first_error(e)
        raise InventoryError(f"{_where(loc, file)}: {msg}") from None
    return _resolve(file, doc, vars_model)


def _resolve(file: Path, doc: InventoryFile, model: type[BaseModel]) -> Inventory:
    for gname, group in doc.groups.items():
        if not NAME_RE.match(gname):
            raise InventoryError(f"{file}: group {gname!r}, field 'groups' (the group's name): names may use "
                                 "letters, digits, '-', '_', '.' (no whitespace or control characters)")
        if gname in doc.hosts:
            raise InventoryError(f"{file}: group {gname!r}: a host has the same name")
        for member in group.hosts:
            if member not in doc.hosts:
                raise InventoryError(
                    f"{file}: group {gname!r}, field 'hosts': unknown host {member!r} "
                    f"(hosts are: {', '.join(doc.hosts)})"
                )
    hosts: dict[str, Host] = {}
    seen_addr: dict[tuple[str, int], str] = {}
    base = file.parent
    for name, entry in doc.hosts.items():
        if not NAME_RE.match(name):
            raise InventoryError(
                f"{file}: host {name!r}, field 'hosts' (the host's name): a host name may use only letters, "
                "digits, '-', '_' and '.' (no whitespace or control characters; at most 63)"
            )
        groups = [g for g, ge in doc.groups.items() if name in ge.hosts]
        layers: list[tuple[str, Connectable]] = [("all", doc.all), *((f"group {g!r}", doc.groups[g]) for g in groups),
                                                 (f"host {name!r}", entry)]
        merged: dict[str, Any] = {}
        for _, layer in layers:
            merged.update(layer.model_dump(include=CONNECTION_FIELDS, exclude_none=True))
        vars_ = _check_vars(file, f"host {name!r}", model, [(who, layer.vars) for who, layer in layers])
        key = merged.get("key")
        if key:
            key_path = _expand(key, base)
            if not key_path.is_file():
                raise InventoryError(f"{file}: host {name!r}, field 'key': key file {key_path} does not exist")
            key = str(key_path)
        known = str(_expand(merged.get("known_hosts", "~/.ssh/known_hosts"), base))
        port = merged.get("port", 22)
        if (entry.address, port) in seen_addr:
            raise InventoryError(
                f"{file}: host {name!r}, field 'address': {entry.address}:{port} is already "
                f"host {seen_addr[(entry.address, port)]!r} (duplicate host)"
            )
        seen_addr[(entry.address, port)] = name
        hosts[name] = Host(
            name=name,
            address=entry.address,
            user=merged.get("user", "root"),
            port=port,
            key=key,
            known_hosts=known,
            become=merged.get("become", True),
            connect_timeout=merged.get("connect_timeout", 10.0),
            command_timeout=merged.get("command_timeout", 600.0),
            groups=tuple(groups),
            vars=vars_,
            source=str(file),
        )
    bastion_vars = _check_vars(file, "bastion", model, [("all", doc.all.vars), ("bastion", doc.bastion.vars)])
    return Inventory(
        path=file,
        hosts=hosts,
        groups={g: list(ge.hosts) for g, ge in doc.groups.items()},
        bastion_vars=bastion_vars,
        all_vars=dict(doc.all.vars),
        scheduler=doc.scheduler,
    )


def _check_vars(file: Path, who: str, model: type[BaseModel], layers: list[tuple[str, dict]]) -> dict[str, Any]:
    """The vars of one host (or the bastion), its layers' in order of precedence (the last wins), checked against
    their declared types; returned with the declared defaults of the vars it does not set."""
    vars_ = {k: v for _, layer in layers for k, v in layer.items()}
    try:
        model.model_validate(vars_)
    except ValidationError as e:
        loc, msg = first_error(e)
        err = next(x for x in e.errors() if tuple(x["loc"]) == loc)
        if err["type"].endswith("_type") or err["type"] == "literal_error":
            msg += f", not {err['input']!r}"  # e.g. a string where a list belongs
        top = str(loc[0]) if loc else ""
        origin = next((name for name, layer in reversed(layers) if top in layer), None)
        set_in = f" (set in {origin}.vars)" if origin and origin != who else ""
        field_ = ".".join(str(p) for p in ("vars", *loc))
        raise InventoryError(f"{file}: {who}, field {field_!r}{set_in}: {msg}") from None
    bad = [k for k in vars_ if not isinstance(k, str)]
    if bad:
        raise InventoryError(f"{file}: {who}, field 'vars': variable name {bad[0]!r} is not a string")
    return {**declared_defaults(model), **vars_}


def _expand(p: str, base: Path) -> Path:
    path = Path(os.path.expanduser(os.path.expandvars(p)))
    return path if path.is_absolute() else (base / path)
