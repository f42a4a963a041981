#!/usr/bin/env bash
# The GPU check on an offline GPU host whose Python image lacks this project's pure-Python
# packages (docs/running.md, "On a GPU host"): installs the wheels of .whl/ (where there is
# one) into a folder of their own, puts dm-clrs's tensorflow stand-ins of stubs/ (where
# there are some) on the path, prints the devices JAX sees, then runs
# benchmarks/gpu_check.py with the arguments given.
#   bash benchmarks/gpu_host.sh [gpu_check.py's arguments, e.g. --rows backend,compile]
#   bash benchmarks/gpu_host.sh --rows levers --out "$OUT/levers.json"   # the levers' rows
# gpu_check.py's --budget-s (450 s by default) bounds its rows; with this script's start
# that stays under the device tool's 540 s.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
site=${NAR_MARKOV_SITE:-/tmp/nar_markov_site}
if [ -d .whl ]; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -d stubs ]; then
  export PYTHONPATH="$PWD/stubs${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" XLA_PYTHON_CLIENT_PREALLOCATE=false
"$PYTHON" -c "import jax; print('gpu_host.sh: jax', jax.__version__, jax.devices(), flush=True)"
exec "$PYTHON" benchmarks/gpu_check.py "$@"
