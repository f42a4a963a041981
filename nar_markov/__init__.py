"""nar_markov: the Markov property of neural algorithmic reasoning (ICLR 2024) on dm-clrs."""

import os as _os

# dm-clrs imports TensorFlow (for its dataset code), which prints CUDA-probe and
# oneDNN banners on every start; they say nothing about our runs. This hides TF's
# later INFO/WARNING logs; TF >= 2.20 writes the start-up ones before reading it,
# which the command-line entry points drop with nar_markov/quiet.py.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# XLA:CPU runs a step on a pool of PJRT_NPROC threads (else NPROC, else as many as the
# CPUs the process may run on: `xla::DefaultThreadPoolSize`), and how it splits work
# over them changes the rounding: binary_search at hidden 128 trains to other losses
# within four steps with 1, 4 or 8 threads than with 2 (3 gave 2's).  Every run in
# results/ was trained with 2 (this project's 2-core machines), so a process that has
# not chosen gets 2, on any machine; set PJRT_NPROC to use more, and get other bits than
# those runs.  It must be set before JAX makes its CPU client, hence here.
if not {"PJRT_NPROC", "NPROC"} & set(_os.environ):
  import sys as _sys
  _bridge = _sys.modules.get("jax._src.xla_bridge")
  if _bridge is None or not _bridge.backends_are_initialized():
    _os.environ["PJRT_NPROC"] = "2"

__version__ = "0.1.0"
