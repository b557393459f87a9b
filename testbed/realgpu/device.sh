#!/usr/bin/env bash
# The device run: one call of the device tool, from the sent checkout's root, with the payload that
# testbed/realgpu/payload.py built carried as .realgpu/carry (docs/engines-gpu.md):
#
#   run     carry [".realgpu/carry"]   command: bash .realgpu/carry/kit/device.sh run [CAMPAIGN ...]
#   orphan  the orphan check alone (when `run` left no time for it): ... device.sh orphan [CAMPAIGN]
#
# The device tool sends the checkout plus the carried paths, 64 MiB a call, so the payload comes in
# several calls chained while the machine is still warm (files outside $OUT last ~30 s after a call):
# payload.py plans them (--plan prints the plan; docs/engines-gpu.md). Every call carries the kit,
# MANIFEST.sha256 and payload.json; the vLLM site archive and the SmolLM2 GGUF come in parts
# (site/part-N, gguf/part-N, each in the manifest), one or more per call. Each carried part is kept in
# /tmp under its whole file's digest (`stash` does only that); once all are there they are joined and
# the whole is checked against kit/site.sha256 or kit/gguf.sha256; a part neither carried nor kept, or
# a joined file of the wrong digest, stops the call (exit 2) in one line. What a call does not carry
# (the site, the tokenizer) must have been unpacked on this machine from the very same file (its
# digest is stamped in /tmp); the kernel self-test is not repeated when it passed on this machine for
# this site.
#
# Steps: check the carried files against MANIFEST.sha256; record the machine (env.txt); unpack the
# vLLM site and the tokenizer; write <venv>/bin/vllm and the env file the runner's spec names; run the
# kernel self-test and STOP (exit 1) before any server if it fails; write the model directories; stamp
# the specs with the GPU's provenance; run specfleet's runner on each campaign (default h200-dummy8b)
# while watch.py records its phases; then, time allowing, the orphan check (orphan.py); pack the
# runner's result folders into $OUT (at most 8 files come back: device.log, env.txt, selftest.txt,
# payload.json, results.tar.gz, summary.txt, phases.json, orphan.json).
# ORPHAN=0 skips the orphan check (a later call, when an earlier one did it).
set -uo pipefail
T0=$(date +%s)
LIMIT=${LIMIT:-570}                    # seconds; under the call's timeout_s (600)
ROOT=$(pwd)
C=${CARRY:-$ROOT/.realgpu/carry}
K=$C/kit
SITE=/tmp/site
D=/tmp/sfgpu                           # specs.py DATA_DIR
VENV=/tmp/vllm-venv                    # specs.py VENV
WORK=/tmp/sfwork                       # specs.py WORK_DIR
OUT=${OUT:-/tmp/sfgpu-out}
PY=${PY:-/opt/torch/.venv/bin/python3}
[[ -x $PY ]] || PY=$(command -v python3)
VLLM_MODULE=${VLLM_MODULE:-vllm.entrypoints.cli.main}
# REHEARSAL=1 (tests/real_gpu/test_device_script.py, never on the device): no self-test, and the
# site may hold the simulated vLLM (VLLM_MODULE=vllm); everything else runs as on the device.
REHEARSAL=${REHEARSAL:-}
ORPHAN=${ORPHAN:-1}
ORPHAN_MIN_S=${ORPHAN_MIN_S:-110}      # an eager 8B start (~40 s), the kill, the runner's clean-up
mkdir -p "$OUT" "$D/models" "$D/specs"
exec > >(tee -a "$OUT/device.log") 2>&1
trap 'sleep 0.5' EXIT                  # let tee flush device.log
log() { echo "[device $(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
die() { log "ERROR: $*"; pack; exit "${2:-1}"; }

unxz_to() {  # concatenated .xz streams to stdout (xz if there, else Python's lzma)
  if command -v xz >/dev/null; then cat "$@" | xz -dc -T0
  else cat "$@" | "$PY" -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer, 1 << 20)"
  fi
}

digest_of() { awk -v f="$1" '$2 == f {print $1}' "$C/MANIFEST.sha256"; }
whole_digest() { awk '{print $1; exit}' "$K/$1.sha256"; }     # NAME: the digest of the file NAME's parts make
whole_name() { awk '{print $2; exit}' "$K/$1.sha256"; }
parts_dir() { echo "$D/parts/$(whole_digest "$1")"; }         # kept across the calls of one warm machine

verify() {  # every carried file against the manifest; what is not carried must be on this machine already
  [[ -f $C/MANIFEST.sha256 ]] || die "$C/MANIFEST.sha256 missing: was .realgpu/carry named in carry?" 2
  (cd "$C" && sha256sum -c --quiet --ignore-missing MANIFEST.sha256) \
    || die "checksum mismatch in $C: the payload did not arrive whole" 2
  local rel n=0
  while read -r _ rel; do
    [[ -f $C/$rel ]] && { n=$((n + 1)); continue; }
    case $rel in
      site/part-*|gguf/part-*|tok.tar.xz) ;;   # one call brings each; install and join() check what is needed
      *) die "$rel missing: the payload did not arrive whole" 2 ;;
    esac
  done < "$C/MANIFEST.sha256"
  log "verified $n carried files"
  cp "$C/payload.json" "$OUT/payload.json"
}

stash() {  # NAME: keep this call's carried NAME/part-* on this machine for the call that joins them
  [[ -f $K/$1.sha256 ]] || return 0
  local dir rel have=0 all=0
  dir=$(parts_dir "$1")
  mkdir -p "$dir"
  while read -r _ rel; do
    [[ $rel == "$1"/part-* ]] || continue
    all=$((all + 1))
    if [[ -f $C/$rel ]]; then cp "$C/$rel" "$dir/" && log "stashed $rel"; fi
    [[ -f $dir/${rel#"$1"/} ]] && have=$((have + 1))
  done < "$C/MANIFEST.sha256"
  log "$1: $have of $all part(s) on this machine"
}

join() {  # NAME DEST: the parts kept here, joined into DEST and checked against kit/NAME.sha256 (else exit 2)
  local dir rel missing=() got want
  dir=$(parts_dir "$1")
  while read -r _ rel; do
    [[ $rel == "$1"/part-* && ! -f $dir/${rel#"$1"/} ]] && missing+=("$rel")
  done < "$C/MANIFEST.sha256"
  (( ${#missing[@]} == 0 )) || die "$(whole_name "$1"): ${missing[*]} neither carried by this call nor kept on this machine by an earlier one ($dir): carry the parts in the order payload.py --plan prints, each call while the machine is warm" 2
  want=$(whole_digest "$1")
  grep " $1/part-" "$C/MANIFEST.sha256" | awk '{print $2}' | sort -t- -k2,2n \
    | while read -r rel; do cat "$dir/${rel#"$1"/}"; done > "$2"
  got=$(sha256sum "$2" | cut -d' ' -f1)
  [[ $got == "$want" ]] || { rm -f "$2"; die "$(whole_name "$1") joined from the parts in $dir has sha256 $got, kit/$1.sha256 says $want: a part kept here is damaged or from another build" 2; }
  log "$(whole_name "$1") joined from its parts: sha256 matches kit/$1.sha256"
}

env_report() {
  {
    date -u; uname -a; nproc; free -g | head -2; df -h /tmp | tail -1
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem --format=csv
    command -v nvcc >/dev/null && nvcc --version | tail -1
    "$PY" -c "import sys, torch, triton, numpy, transformers, tokenizers, numba; print(sys.version); \
print('torch', torch.__version__, torch.version.cuda, torch.cuda.is_available()); print('triton', triton.__version__); \
print('numpy', numpy.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, \
'numba', numba.__version__)"
  } > "$OUT/env.txt" 2>&1
  log "env: $(grep -m1 -i nvidia "$OUT/env.txt" | tail -1); $(grep -m1 '^torch' "$OUT/env.txt")"
}

install() {
  local want xz
  [[ -f $K/site.sha256 ]] || die "kit/site.sha256 missing: a payload built before the site was split (payload.py --split)" 2
  want=$(whole_digest site)
  stash site
  if [[ -f $SITE/.complete && $(cat "$SITE/.complete") == "$want" ]]; then log "site already in $SITE"; else
    xz=$(parts_dir site)/$(whole_name site)
    join site "$xz"
    log "unpacking the vLLM site into $SITE"
    rm -rf "$SITE" && unxz_to "$xz" | tar -C /tmp -xf - || die "site unpack failed"
    rm -f "$xz"
    echo "$want" > "$SITE/.complete"
  fi
  want=$(digest_of tok.tar.xz)
  if ! [[ -f $D/models/.tok && $(cat "$D/models/.tok") == "$want" ]]; then
    [[ -f $C/tok.tar.xz ]] || die "tok.tar.xz not carried and not unpacked here by an earlier call" 2
    unxz_to "$C/tok.tar.xz" | tar -C "$D/models" -xf - || die "tokenizer unpack failed"
    if [[ -f $D/models/smollm2-tok/tokenizer.gguf && ! -f $D/models/smollm2-tok/tokenizer.json ]]; then
      # the builder carries the GGUF's metadata only (models.py tokgguf); the image's transformers makes the files
      PYTHONPATH=$SITE "$PY" "$K/models.py" tokenizer --gguf "$D/models/smollm2-tok/tokenizer.gguf" \
        --out "$D/models/smollm2-tok" || die "tokenizer from the GGUF metadata failed"
    fi
    echo "$want" > "$D/models/.tok"
  fi
  cp "$K/question.jsonl" "$D/question.jsonl"
  while read -r f; do cp "$K/$f" "$D/" || die "kit lacks $f (runner-files.txt: the worker program, specfleet.campaign.worker_zipapp)"; done <"$K/runner-files.txt"
  mkdir -p "$VENV/bin"
  # The runner wants a venv: <venv>/bin/vllm (server, bench) and <venv>/bin/python (prompt-length
  # check, engine version): the image's python (it holds torch) with the payload on its path.
  cat > "$VENV/bin/python" <<EOF
#!/bin/sh
export PYTHONPATH=$SITE\${PYTHONPATH:+:\$PYTHONPATH}
exec $PY "\$@"
EOF
  cat > "$VENV/bin/vllm" <<EOF
#!/bin/sh
exec $VENV/bin/python -m $VLLM_MODULE "\$@"
EOF
  chmod +x "$VENV/bin/python" "$VENV/bin/vllm"
  cat > "$D/vllm.env" <<EOF
PYTHONPATH=$SITE
HF_HUB_OFFLINE=1
TRANSFORMERS_OFFLINE=1
HF_HOME=/tmp/hf
VLLM_NO_USAGE_STATS=1
DO_NOT_TRACK=1
PYTHONUNBUFFERED=1
TOKENIZERS_PARALLELISM=false
VLLM_USE_FLASHINFER_SAMPLER=0
VLLM_CACHE_ROOT=/tmp/vllm-cache
TRITON_CACHE_DIR=/tmp/triton-cache
NCCL_NVLS_ENABLE=0
TORCH_SYMM_MEM_DISABLE_MULTICAST=1
NVSHMEM_DISABLE_NVLS=1
EOF
  # the engine version as the runner reads it (package metadata; `vllm --version` imports vLLM: ~20 s)
  log "site $(du -sh "$SITE" | cut -f1); engine version: $("$VENV/bin/python" -c \
    "import sys; sys.path.insert(0, sys.argv[1]); from specfleet_worker.host import ENGINE_VERSION_PY; exec(ENGINE_VERSION_PY)" "$D/runner.pyz" 2>&1 | tail -1)"
}

selftest() {
  if [[ -n $REHEARSAL ]]; then echo "REHEARSAL: kernel self-test not run" | tee "$OUT/selftest.txt"; return; fi
  local ok=$D/selftest.ok want
  want=$(whole_digest site)
  if [[ -f $ok && $(head -1 "$ok") == "$want" ]]; then  # passed on this machine, for this very site
    { echo "kernel self-test passed earlier on this machine (same site.tar.xz):"; tail -n +2 "$ok"; } \
      | tee "$OUT/selftest.txt"
    return
  fi
  PYTHONPATH=$SITE VLLM_USE_FLASHINFER_SAMPLER=0 "$PY" "$K/selftest.py" > "$OUT/selftest.txt" 2>&1
  local rc=$?
  tail -4 "$OUT/selftest.txt"
  (( rc == 0 )) || die "selftest failed (rc $rc): no server started; see selftest.txt" 1
  { echo "$want"; tail -4 "$OUT/selftest.txt"; } > "$ok"
}

models() {
  "$PY" "$K/models.py" dummy --shape qwen3-8b --tok "$D/models/smollm2-tok" --out "$D/models/qwen3-8b-dummy" \
    || die "model directory failed"
  "$PY" "$K/models.py" eagle3 --target "$D/models/qwen3-8b-dummy" --out "$D/models/qwen3-8b-eagle3-dummy" \
    || die "EAGLE-3 drafter directory failed"
  gguf
}

gguf() {  # stash the carried GGUF parts; with all of them here, the bf16 SmolLM2 directory
  [[ -f $K/gguf.sha256 ]] || return 0
  stash gguf
  [[ -d $D/models/smollm2-135m ]] && return 0
  local rel f
  while read -r _ rel; do
    [[ $rel == gguf/part-* && ! -f $(parts_dir gguf)/${rel#gguf/} ]] && { log "GGUF: not all parts here yet"; return 0; }
  done < "$C/MANIFEST.sha256"
  f=$D/$(whole_name gguf)
  [[ -f $f ]] || join gguf "$f"
  [[ -n $REHEARSAL ]] && { log "REHEARSAL: GGUF assembled, not converted"; return 0; }
  log "GGUF whole: writing the bf16 SmolLM2 directory"
  PYTHONPATH=$SITE "$PY" "$K/models.py" smollm2 --gguf "$f" \
    --tok "$D/models/smollm2-tok" --out "$D/models/smollm2-135m" || die "SmolLM2 conversion failed"
}

campaign() {  # specfleet's worker-side runner executes the stamped spec made by specfleet's planner
  run_spec "$1" "$1" h200
}

run_spec() {  # SPEC_STEM CAMPAIGN NODE [WORK_ROOT]: stamp, then the runner under the phase watcher
  local stem=$1 name=$2 node=$3 root=${4:-$WORK} budget
  [[ -f $K/specs/$stem.json ]] || die "no spec $stem in the payload (have: $(ls "$K/specs"))" 2
  if ! "$PY" -c "import json, os, sys; s = json.load(open(sys.argv[1])); sys.exit(not any(
      os.path.isfile(os.path.join(d, 'config.json')) for d in s['model_candidates']))" "$K/specs/$stem.json"; then
    log "skip $stem: its model is not on this machine (the GGUF parts not all carried yet?)"; return 0
  fi
  "$PY" "$K/specs.py" stamp "$K/specs/$stem.json" "$D/specs/$stem.json" "$PY" || die "stamping $stem failed"
  budget=$(( $(left) - 40 ))
  (( budget > 120 )) || { log "skip $stem: only ${budget}s left"; return 0; }
  log "campaign $name on $node: runner with a ${budget}s budget"
  mkdir -p "$root/$name/$node"
  "$PY" "$K/watch.py" "$root/$name/$node/state.json" "$OUT/phases-$node.json" &
  local watcher=$!
  timeout -k 25 "$budget" "$PY" "$D/runner.pyz" --spec "$D/specs/$stem.json" > "$root/$name/$node/runner.log" 2>&1
  log "runner exit $? for $stem"
  sleep 0.5; kill "$watcher" 2>/dev/null; wait "$watcher" 2>/dev/null
  tail -3 "$root/$name/$node/runner.log"
}

pair() {  # issue 17: one runner per GPU at once, each server seeing its GPU only (specs.for_gpu)
  local name=$1 n i pids=() node
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  (( n >= ${PAIR_GPUS:-2} )) || die "pair $name needs ${PAIR_GPUS:-2} GPUs; nvidia-smi lists $n" 2
  for (( i = 0; i < ${PAIR_GPUS:-2}; i++ )); do
    "$PY" "$K/specs.py" gpu-env "$D/vllm.env" "$i" "$D/vllm-gpu$i.env" || die "env file of GPU $i failed"
  done
  for (( i = 0; i < ${PAIR_GPUS:-2}; i++ )); do
    node=$("$PY" -c "import sys; sys.path.insert(0, sys.argv[1]); import specs; print(specs.GPU_NODES[int(sys.argv[2])])" "$K" "$i")
    run_spec "$name.$node" "$name" "$node" "$WORK/gpu$i" &   # specs.gpu_work_dir
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
}

orphan() {
  log "orphan check: SIGKILL the API server mid-benchmark, see the runner end the EngineCore"
  timeout -k 10 $(( $(left) - 20 )) "$PY" "$K/orphan.py" "$D/specs/$1.json" "$D/runner.pyz" "$OUT/orphan.json" \
    || log "orphan check exit $?"
}

merge_phases() {  # one phases.json (the 8-file limit): every watcher's file, keyed by state path
  compgen -G "$OUT/phases-*.json" >/dev/null || return 0
  "$PY" -c "import json, sys
doc = {}
for f in sys.argv[2:]:
    doc.update(json.load(open(f)))
json.dump(doc, open(sys.argv[1], 'w'), indent=1)" "$OUT/phases.json" "$OUT"/phases-*.json && rm -f "$OUT"/phases-*.json
}

pack() {
  [[ -d $WORK ]] || return 0
  merge_phases
  "$PY" "$K/watch.py" --summary "$WORK" "$OUT/phases.json" > "$OUT/summary.txt" 2>&1
  cat "$OUT/summary.txt"
  tar -C "$WORK" --exclude='*.lock' -czf "$OUT/results.tar.gz" . 2>/dev/null
}

case "${1:-}" in
  run)
    shift
    verify; env_report; install; selftest; models
    for name in "${@:-h200-dummy8b}"; do campaign "$name"; done
    if (( ! ORPHAN )); then log "orphan check not asked for (ORPHAN=0)"
    elif (( $(left) > ORPHAN_MIN_S )); then orphan "${1:-h200-dummy8b}"
    else log "orphan check skipped: $(left)s left"; fi
    pack
    ;;
  orphan)  # the orphan check alone (a second call; a warm machine keeps /tmp/site)
    shift
    verify; env_report; install; selftest; models
    name=${1:-h200-dummy8b}
    "$PY" "$K/specs.py" stamp "$K/specs/$name.json" "$D/specs/$name.json" "$PY" || die "stamping $name failed"
    orphan "$name"; pack
    ;;
  pair)  # issue 17 (nvidia-h200-x2): PAIR_GPUS=1 runs the first GPU's half alone (on nvidia-h200)
    shift
    verify; env_report; install; selftest; models
    pair "${1:-h200x2-dummy8b}"; pack
    ;;
  stash)  # a call that brings parts only (the site's first parts, payload.py --plan): keep them, run nothing
    verify; stash site; stash gguf ;;
  selftest)
    verify; env_report; install; selftest ;;
  prepare)  # the product path's first call (fleet.sh): the provided venv and the models, no campaign
    verify; env_report; install; selftest; models ;;
  *) echo "usage: device.sh run [CAMPAIGN ...] | orphan [CAMPAIGN] | pair [CAMPAIGN] | selftest | prepare | stash"; exit 2 ;;
esac
log "done ($(left)s of the call's budget left)"
