#!/usr/bin/env bash
# Create (or update) the project environment: .venv with pinned Python packages,
# plus the system libraries some stages use when this machine allows it.
#
#   scripts/setup-env.sh            # runtime: workflow and training
#   scripts/setup-env.sh --test     # also test tools, peer libraries (PyG), MPI/ParMETIS, Slurm, Chromium
#
# Idempotent: a second run only checks.  System packages (Debian/Ubuntu, apt) are
# installed when running as root; otherwise the script says what to install and
# the stages that need them say so clearly when they run.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "setup-env: Python >= 3.11 is required (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 1
fi

# --- system libraries -------------------------------------------------------
apt_pkgs=(libmetis5)                     # METIS C API: multi-constraint partitioning
if [[ $want_test == 1 ]]; then
  apt_pkgs+=(libscotchparmetis-dev openmpi-bin libopenmpi-dev   # ParMETIS API over MPI (PT-Scotch)
             slurmctld slurmd slurm-client munge                # local single-node Slurm test cluster
             chromium)                                          # report screenshot test
fi
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "setup-env: installing system packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup-env: warning: system packages missing (install them for full functionality): ${missing[*]}" >&2
  fi
fi

# --- Python environment -------------------------------------------------------
if [[ ! -x .venv/bin/python ]]; then
  echo "setup-env: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.gnnflow-installed
extras=""
[[ $want_test == 1 ]] && extras="[test,mpi,peers]"
key="$(cat pyproject.toml setup.py src/gnnflow/*/_*.c | sha256sum | cut -c1-16)$extras"
if [[ ! -f $stamp ]] || ! grep -qx "$key" "$stamp"; then
  echo "setup-env: installing gnnflow$extras into .venv (torch CPU build; see README for CUDA)"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".$extras"
  echo "$key" >"$stamp"
fi
echo "setup-env: ready (.venv, $(.venv/bin/python -c 'import torch, dgl; print("torch", torch.__version__, "dgl", dgl.__version__)' 2>/dev/null))"
