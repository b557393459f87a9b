"""Device profiles and the vLLM <-> torch pin. Stdlib only (imported by the builder, tests, report).

A payload is built for one profile: the device's Python and torch are fixed (the image holds them,
nothing can be fetched there, and a torch does not fit a 64 MiB call), so the vLLM release must be
one whose wheel pins exactly that torch. The pin is read from the downloaded wheel's METADATA and
checked (`check_pin`), so a wrong choice stops the build instead of failing on the device.
"""
from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path

MIB = 1024 * 1024


@dataclass(frozen=True)
class Profile:
    name: str
    python: str                 # cpXY of the device's interpreter (wheels are chosen for it)
    torch: str                  # the device image's torch release (without the +cuXXX label)
    cuda: str
    sm: int                     # compute capability kept in the fatbins (90 = Hopper)
    vllm: str                   # the vLLM release chosen for this torch (checked by check_pin)
    gpu_name: str               # what nvidia-smi prints; the report's bandwidth lookup key
    interpreter: str            # python3 holding torch on the device
    call_bytes: int = 64 * MIB  # the device tool's limit per call (tree + carried paths)
    slack_bytes: int = 2 * MIB
    # Versions the device image has (read there; see docs/engines-gpu.md). The payload carries
    # none of these.
    image_packages: dict[str, str] = field(default_factory=dict)


H200 = Profile(
    name="nvidia-h200", python="3.12", torch="2.11.0", cuda="13.0", sm=90, vllm="0.26.0",
    gpu_name="NVIDIA H200", interpreter="/opt/torch/.venv/bin/python3",
    image_packages={"torch": "2.11.0+cu130", "triton": "3.6.0", "transformers": "5.17.0",
                    "tokenizers": "0.23.2", "numba": "0.68.0", "numpy": "2.5.2"},
)
#: The lent H100 runs the same image ('cuda': the same Python, torch, CUDA and packages; KINDS.md) on the
#: same compute capability (sm_90), so the H200's payload is byte for byte the H100's: one build serves
#: both (`payload_key`; checked on an H100 by `device.sh prepare`'s kernel self-test, docs/engines-gpu.md).
H100 = replace(H200, name="nvidia-h100-x1", gpu_name="NVIDIA H100 80GB HBM3")
PROFILES = {p.name: p for p in (H100, H200)}


def payload_key(p: Profile) -> tuple:
    """What a payload is built from: two profiles with the same key take the same payload."""
    return (p.python, p.torch, p.cuda, p.sm, p.vllm, p.interpreter, tuple(sorted(p.image_packages.items())))


def serves(p: Profile) -> list[str]:
    """The GPUs (nvidia-smi names) a payload built for `p` serves: every profile of the same payload key."""
    return sorted(q.gpu_name for q in PROFILES.values() if payload_key(q) == payload_key(p))

#: vLLM releases on PyPI and the torch each pins, as read from their wheels' METADATA on
#: 2026-12-01 (only the releases that were read; 0.20.0 to 0.26.0 all pin 2.11.0, 0.27.x too needs
#: 2.13.0). The field report's 0.28.0 needs torch 2.13, which the H200 image lacks.
VLLM_TORCH_PINS = {"0.20.0": "2.11.0", "0.26.0": "2.11.0", "0.28.0": "2.13.0", "0.33.0": "2.14.0"}

class PinError(ValueError):
    pass


def _version_key(v: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def choose_vllm(torch: str, pins: dict[str, str] = VLLM_TORCH_PINS) -> str:
    """The newest vLLM release whose wheel pins `torch` (local label such as +cu130 ignored)."""
    base = torch.split("+", 1)[0]
    fits = [v for v, t in pins.items() if t == base]
    if not fits:
        raise PinError(f"no known vLLM release pins torch {base} (known pins: "
                       + ", ".join(f"{v}->{t}" for v, t in sorted(pins.items(), key=lambda i: _version_key(i[0])))
                       + ")")
    return max(fits, key=_version_key)


def wheel_requires(wheel: Path) -> list[str]:
    """Requires-Dist lines of a wheel (extras included)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
        if meta is None:
            raise PinError(f"{wheel}: no .dist-info/METADATA in the wheel")
        text = z.read(meta).decode("utf-8", "replace")
    return [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Requires-Dist:")]


def torch_pin(requires: list[str]) -> str | None:
    """The exact torch version a requirement list pins (`torch==X`, no extra marker), else None."""
    for r in requires:
        if "extra ==" in r:
            continue
        m = re.match(r"^torch\s*(?:\(\s*)?==\s*([\w.+-]+)", r)
        if m:
            return m.group(1)
    return None


def check_pin(wheel: Path, profile: Profile) -> str:
    """Raise PinError unless the vLLM wheel pins the profile's torch; return the pin."""
    pin = torch_pin(wheel_requires(wheel))
    if pin is None:
        raise PinError(f"{wheel.name}: no 'torch==' requirement found; cannot check it against the "
                       f"{profile.name} image's torch {profile.torch}")
    if pin.split("+", 1)[0] != profile.torch:
        raise PinError(f"{wheel.name} pins torch {pin} but the {profile.name} image has torch "
                       f"{profile.torch}: choose vLLM {choose_vllm(profile.torch)} (field vllm)")
    return pin
