#!/usr/bin/env bash
# Prepare this machine for specfleet: Debian packages and the project's venv (.venv).
# Idempotent and quick when nothing changed. Needs root (apt, network namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "scripts/setup.sh: run as root (the testbed makes network namespaces)" >&2; exit 1
fi

PACKAGES="openssh-server openssh-client rsync iproute2 iputils-arping socat procps psmisc python3-venv python3-yaml util-linux sudo chromium slurmctld slurmd slurm-client munge ${SPECFLEET_EXTRA_PACKAGES:-}"
missing=""
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  apt-get update -qq
  # Packages with daemons (munge, slurmctld, slurmd) must not start system services: the testbed
  # starts its own by PID, with its own config. policy-rc.d 101 = "do not start" (invoke-rc.d).
  made_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
  [ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
fi

# The control venv uses Debian's python: the workers' venv must be built from an
# interpreter the workers have at the same path, and pyenv's is not one of them.
stamp=.venv/.specfleet-setup
want=$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: building .venv"
  /usr/bin/python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test,docs]'
  echo "$want" > "$stamp"
fi
# The checkout's modules as bytecode, as pip leaves an installed package: the editable install
# compiles nothing, and where PYTHONDONTWRITEBYTECODE=1 is set every `fab` compiled them all
# again (~0.25 s of CPU per start). A stale file is ignored (Python checks each against its source).
.venv/bin/python -m compileall -q specfleet roles tasks testbed fabfile.py >/dev/null
