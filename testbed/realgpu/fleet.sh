#!/usr/bin/env bash
# The product path on a lent single-GPU machine, H100 or H200 (docs/engines-gpu.md "The product path on
# the lent GPU"): the device becomes one node of a fleet, reached over real SSH on loopback, and
# specfleet's own commands run on it. Run from the sent checkout's root, after `device.sh prepare`
# unpacked the vLLM site, made the provided venv (/tmp/vllm-venv) and the model directories on this
# same warm machine. NODE names the node this machine is (w1 on the first machine, w2 on the next one:
# a campaign folder then holds both, and `fab report` gates them as two nodes):
#
#   up NODE      carry [.realgpu/fleet]  command: bash .realgpu/fleet/fleet.sh up w1
#           sshd + rsync + ssh from Debian packages (dpkg-deb -x under /tmp/sfssh, never into /), the
#           controller's wheels (--target /tmp/sfctl/site), specfleet from the snapshot; the inventory
#           for NODE (fleetinv.py: the template's one worker renamed); then `fab facts`, `fab provision`,
#           `fab bench --no-wait` and, until the budget ends, the wait (FOLLOW=1: then, COLLECT_S (70 s)
#           before the end or once the runner is done, `fab collect` and `fab report` in the same call)
#   finish NODE  carry [.realgpu/fleet]  command: bash .realgpu/fleet/fleet.sh finish w1
#           `fab bench` again (it reattaches to the runner and follows it to the end), `fab collect`,
#           `fab report` (the GPU's bandwidth looked up from the name the worker reported)
#   collect NODE carry [.realgpu/fleet]  `fab collect` and `fab report` now: what is finished, no wait
#
# The plan (PLAN, default plans/gpu-nodes-dummy8b.yml) names the campaign; nothing here names a GPU.
# Every call packs at most 8 files into $OUT: fleet.log, runs.tar.gz (the event logs), samples.jsonl
# (sampler.py: SM clock, throttle reasons, a fixed-loop CPU timing), results.tar.gz, sshd.log, state.json.
# REHEARSAL=1 (tests, never on the device): PORT picks the loopback port, nvidia-smi may be absent.
set -uo pipefail
T0=$(date +%s)
LIMIT=${LIMIT:-570}
ROOT=$(pwd)
F=${FLEET:-$ROOT/.realgpu/fleet}
S=${SSHROOT:-/tmp/sfssh}          # inventory.yml: key, known_hosts, cc live here
CTL=${CTL:-/tmp/sfctl}
OUT=${OUT:-/tmp/sffleet-out}
PORT=${PORT:-2222}                # inventory.yml's port (a rehearsal passes INVENTORY with its own)
PY=${PY:-/opt/torch/.venv/bin/python3}
[[ -x $PY ]] || PY=$(command -v python3)
PLAN=${PLAN:-plans/gpu-nodes-dummy8b.yml}
NODE=${2:-}
mkdir -p "$OUT" "$S/bin" "$CTL"
exec > >(tee -a "$OUT/fleet.log") 2>&1
trap 'sleep 0.5' EXIT
log() { echo "[fleet $(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
LIBS=$S/root/lib/x86_64-linux-gnu:$S/root/usr/lib/x86_64-linux-gnu

verify() {
  (cd "$F" && sha256sum -c --quiet MANIFEST.sha256) || { log "ERROR: $F does not match its manifest"; exit 2; }
}

SSHD=$S/root/usr/sbin/sshd
tools() {  # the Debian packages, unpacked into a folder; wrappers give only these binaries their libraries
  if ! compgen -G "$F/debs/*.deb" >/dev/null; then   # a rehearsal without debs/: this machine's own tools
    local sys_path=${PATH//$S\/bin:/}   # never our own wrapper (it would exec itself)
    for t in ssh ssh-keygen rsync; do printf '#!/bin/sh\nexec %s "$@"\n' "$(PATH=$sys_path command -v $t)" > "$S/bin/$t"; done
    SSHD=/usr/sbin/sshd LIBS=
  else
    if [[ ! -x $SSHD ]]; then
      for d in "$F"/debs/*.deb; do dpkg-deb -x "$d" "$S/root" || { log "ERROR: dpkg-deb -x $d"; exit 1; }; done
    fi
    for t in ssh ssh-keygen rsync; do
      printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$LIBS" "$S/root/usr/bin/$t" > "$S/bin/$t"
    done
  fi
  local cc
  cc=$(command -v gcc || command -v cc || true)
  printf '#!/bin/sh\nexec %s "$@"\n' "${cc:-/bin/false}" > "$S/bin/cc"
  chmod +x "$S/bin/"*
  log "tools: $("$S/bin/rsync" --version | head -1); $("$S/bin/ssh" -V 2>&1); cc ${cc:-missing}"
}

sshd_up() {  # a real sshd on loopback: root by key only, the session's PATH finds the unpacked rsync first
  [[ -f $S/id_ed25519 ]] || "$S/bin/ssh-keygen" -q -t ed25519 -N '' -C specfleet-fleet -f "$S/id_ed25519"
  [[ -f $S/host_ed25519 ]] || "$S/bin/ssh-keygen" -q -t ed25519 -N '' -C specfleet-host -f "$S/host_ed25519"
  cp "$S/id_ed25519.pub" "$S/authorized_keys"
  getent passwd sshd >/dev/null || useradd --system --no-create-home --home-dir /run/sshd \
    --shell /usr/sbin/nologin sshd 2>/dev/null || echo 'sshd:x:997:65534::/run/sshd:/usr/sbin/nologin' >> /etc/passwd
  mkdir -p /run/sshd && chmod 0755 /run/sshd
  cat > "$S/sshd_config" <<EOF
Port $PORT
ListenAddress 127.0.0.1
HostKey $S/host_ed25519
AuthorizedKeysFile $S/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile $S/sshd.pid
MaxStartups 64:30:128
MaxSessions 64
SetEnv PATH=$S/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LogLevel VERBOSE
EOF
  if [[ -f $S/sshd.pid ]] && kill -0 "$(cat "$S/sshd.pid")" 2>/dev/null; then log "sshd already up (pid $(cat "$S/sshd.pid"))"; return; fi
  LD_LIBRARY_PATH=$LIBS "$SSHD" -t -f "$S/sshd_config" || { log "ERROR: sshd -t"; exit 1; }
  LD_LIBRARY_PATH=$LIBS "$SSHD" -f "$S/sshd_config" -E "$S/sshd.log" || { log "ERROR: sshd start"; exit 1; }
  sleep 0.5
  log "sshd up on 127.0.0.1:$PORT (pid $(cat "$S/sshd.pid" 2>/dev/null))"
}

controller() {  # specfleet and its dependencies for the image's python (it has pandas, rich, jinja2, yaml)
  if ! compgen -G "$F/wheels/*.whl" >/dev/null; then log "controller: no wheels/ (a rehearsal: $PY has them)"
  elif [[ ! -f $CTL/site/.complete ]]; then
    rm -rf "$CTL/site"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$CTL/site" "$F"/wheels/*.whl \
      || { log "ERROR: controller wheels"; exit 1; }
    touch "$CTL/site/.complete"
  fi
  rm -rf "$CTL/repo" && mkdir -p "$CTL/repo" && tar -C "$CTL/repo" -xzf "$F/snapshot.tar.gz"
  # the inventory of this node: the template's one worker renamed NODE (a rehearsal passes its own template);
  # the template's datasets are relative to it: the controller's copy names the snapshot's files
  "$PY" "$CTL/repo/testbed/realgpu/fleetinv.py" "${INVENTORY:-$CTL/repo/testbed/realgpu/fleet/inventory.yml}" \
    "$NODE" "$CTL/inventory.yml" --datasets-root "$CTL/repo/datasets" || { log "ERROR: the inventory of $NODE"; exit 2; }
  [[ $PLAN = /* ]] || PLAN=$CTL/repo/$PLAN
  CAMPAIGN=$("$PY" "$CTL/repo/testbed/realgpu/fleetinv.py" --campaign "$PLAN") || { log "ERROR: $PLAN"; exit 2; }
  log "controller: $("$PY" --version) with $(ls "$F"/wheels 2>/dev/null | wc -l) wheels; specfleet $(cat "$CTL/repo/SNAPSHOT")"
  log "node $NODE, plan $PLAN (campaign $CAMPAIGN); $(PYTHONPATH=$CTL/site:$CTL/repo "$PY" "$CTL/repo/testbed/realgpu/fleetinv.py" --gpu)"
}

venv_fixup() {  # the provided venv's CUDA_HOME (env role: <venv>/lib/python3.12/site-packages/nvidia/cu13)
  local cu=/tmp/vllm-venv/lib/python3.12/site-packages/nvidia/cu13 img
  [[ -x /tmp/vllm-venv/bin/python ]] || { log "ERROR: no provided venv: run device.sh prepare first"; exit 2; }
  mkdir -p "$cu"
  img=$("$PY" -c "import os, nvidia; print(os.path.join(list(nvidia.__path__)[0], 'cu13'))" 2>/dev/null || true)
  for d in bin lib include; do [[ -e $img/$d && ! -e $cu/$d ]] && ln -s "$img/$d" "$cu/$d"; done
  log "provided venv: CUDA_HOME $cu -> ${img:-none} ($(ls "$cu" 2>/dev/null | tr '\n' ' '))"
}

sampler() {  # detached (setsid): outlives this call, records until the machine goes back
  if [[ -f $CTL/sampler.pid ]] && kill -0 "$(cat "$CTL/sampler.pid")" 2>/dev/null; then return; fi
  setsid nohup "$PY" "$CTL/repo/testbed/realgpu/sampler.py" "$CTL/samples.jsonl" </dev/null >/dev/null 2>&1 &
  echo $! > "$CTL/sampler.pid"
  log "sampler pid $(cat "$CTL/sampler.pid") -> $CTL/samples.jsonl"
}

fab() {  # one product command; its exit code is logged, never hidden
  local rc
  log "\$ fab $*"
  (cd "$CTL/repo" && PATH=$S/bin:$PATH PYTHONPATH=$CTL/site:$CTL/repo SPECFLEET_RUNS_DIR=$CTL/runs \
     COLUMNS=160 timeout -s INT -k 20 "$(( $(left) - ${RESERVE:-15} ))" "$PY" -m fabric "$@")
  rc=$?
  log "fab $1 exit $rc"
  return $rc
}

pack() {
  [[ -d $CTL/runs ]] && tar -C "$CTL" -czf "$OUT/runs.tar.gz" runs
  [[ -f $CTL/samples.jsonl ]] && cp "$CTL/samples.jsonl" "$OUT/samples.jsonl"
  [[ -d $CTL/results ]] && tar -C "$CTL" -czf "$OUT/results.tar.gz" results
  [[ -f $S/sshd.log ]] && tail -c 200000 "$S/sshd.log" > "$OUT/sshd.log"
  local st=/tmp/sfgpu/campaigns/${CAMPAIGN:-none}/$NODE/state.json
  [[ -f $st ]] && cp "$st" "$OUT/state.json"
  true
}

case "${1:-}" in up|finish|collect) ;; *) echo "usage: fleet.sh up|finish|collect NODE (e.g. w1 on the first machine, w2 on the next)"; exit 2 ;; esac
[[ $NODE =~ ^[A-Za-z][A-Za-z0-9_-]{0,31}$ ]] || { echo "usage: fleet.sh up|finish NODE: NODE '$NODE' is not a node name (e.g. w1, w2)"; exit 2; }
INV="--inventory $CTL/inventory.yml"
collect_report() {  # collect over SSH, then the report of what this results folder holds (this node's)
  fab collect $INV --hosts "$NODE" --plan "$PLAN" --results "$CTL/results"
  RESERVE=5 fab report --plan "$PLAN" --results "$CTL/results"   # the bandwidth: looked up from the GPU the worker named
}
runner_done() {  # the runner's state on this node: every item done or failed
  "$PY" -c "import json, sys; s = json.load(open(sys.argv[1]))
sys.exit(0 if s.get('items') and all(i['status'] in ('done', 'failed') for i in s['items']) else 1)" "$1" 2>/dev/null
}
case "$1" in
  up)
    verify; tools; sshd_up; controller; venv_fixup; sampler
    fab facts $INV --accept-new-host-keys || { pack; exit 1; }
    fab provision $INV || { pack; exit 1; }
    fab provision $INV        # the second run: nothing to change
    fab bench $INV --hosts "$NODE" --plan "$PLAN" --results "$CTL/results" --no-wait || { pack; exit 1; }
    st=/tmp/sfgpu/campaigns/$CAMPAIGN/$NODE/state.json
    # the runner goes on detached; show its progress now and then. FOLLOW=1: collect in this same call,
    # keeping COLLECT_S for it (what is finished by then; `finish` or `collect` in a later call takes the rest)
    reserve=$(( ${FOLLOW:+${COLLECT_S:-70}} + 40 ))
    while (( $(left) > reserve )); do
      sleep 10
      [[ -f $st ]] && "$PY" -c "import json, sys
s = json.load(open(sys.argv[1])); print('  runner:', ', '.join(f\"{i['name']} {i['status']}\" for i in s.get('items', [])))" "$st"
      runner_done "$st" && break
    done
    [[ -n ${FOLLOW:-} ]] && collect_report
    pack ;;
  collect)  # what is finished now, without waiting for the runner (a call with little time left)
    verify; tools; sshd_up; controller; sampler
    collect_report
    pack ;;
  finish)
    verify; tools; sshd_up; controller; sampler
    fab bench $INV --hosts "$NODE" --plan "$PLAN" --results "$CTL/results"  # planned.json where collect reads it
    collect_report
    pack ;;
esac
log "done ($(left)s of the call's budget left)"
