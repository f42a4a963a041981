"""Quiet start-up for command-line entry points: no TensorFlow/absl banners unless -v.

dm-clrs imports TensorFlow, whose absl logging writes start-up banners straight to file
descriptor 2 (TF_CPP_MIN_LOG_LEVEL does not stop them); `setup()`, called before clrs is
imported, keeps them out and lets warnings, errors and anything unknown through.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import os
import re
import sys
import tempfile
from typing import Callable, Iterator, Optional, Sequence

ENV_VERBOSE = "NAR_MARKOV_VERBOSE"

# Lines TensorFlow/XLA write to fd 2 while TensorFlow is imported that say nothing
# about our runs (CPU builds; the cuFFT/cuDNN/cuBLAS ones on GPU hosts).
_BANNERS = re.compile("|".join([
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called",
    # absl/glog INFO lines: `I0000 00:00:1795368444.271320    3710 port.cc:153] ...`
    r"^I\d{4} [\d:.]+\s+\d+ \S+:\d+\] ",
    # TensorFlow's own INFO format: `2025-09-17 14:44:05.157831: I external/...`
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: I ",
    r"Unable to register cu(FFT|DNN|BLAS) factory: Attempting to register factory",
    r"computation placer already registered",
    r"TF-TRT Warning: Could not find TensorRT",
]))

# absl (Python) log messages of dm-clrs that are expected in every run.
NOISY_ABSL_MESSAGES = (
    "Sampling dataset on-the-fly, unlimited samples.",
)

_installed = False


def wants_verbose(argv: Optional[Sequence[str]] = None) -> bool:
  """Whether `argv` (None: sys.argv[1:]) has -v (-vv, ...) or --verbose, or NAR_MARKOV_VERBOSE=1."""
  argv = sys.argv[1:] if argv is None else argv
  flag = any(a == "--verbose" or re.fullmatch(r"-v+", a) for a in argv)
  return flag or os.environ.get(ENV_VERBOSE) == "1"


def add_flag(parser) -> None:
  """The -v / --verbose flag `setup()` reads, on an argparse parser."""
  parser.add_argument("-v", "--verbose", action="store_true",
                      help="show library start-up messages (TensorFlow, absl INFO)")


def is_banner(line: str) -> bool:
  """Whether `line` is one of the known start-up banners (`_BANNERS`)."""
  return bool(_BANNERS.search(line))


@contextlib.contextmanager
def filtered_stderr(drop: Callable[[str], bool] = is_banner) -> Iterator[None]:
  """Captures file descriptor 2 in the block and then writes back all but the lines to `drop`.

  What the block writes to fd 2 (C libraries, and Python's sys.stderr once flushed) goes to
  a temporary file; at its end, also where it raises, the lines `drop` does not take
  (default: the banners) are written to sys.stderr.
  """
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)
      captured.seek(0)
      text = captured.read().decode("utf-8", errors="replace")
      kept = [l for l in text.splitlines(keepends=True) if not drop(l)]
      if kept:
        sys.stderr.write("".join(kept))
        sys.stderr.flush()


class _QuietImport(importlib.abc.MetaPathFinder):
  """Runs the import of the named top-level modules inside `filtered_stderr`."""

  def __init__(self, names: Sequence[str]):
    self._names = set(names)
    self._busy = False

  def find_spec(self, fullname, path, target=None):  # pylint: disable=unused-argument
    if fullname not in self._names or self._busy:
      return None
    self._busy = True
    try:
      spec = importlib.util.find_spec(fullname)  # the other finders' answer
    finally:
      self._busy = False
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
      return None
    exec_module = spec.loader.exec_module

    def quiet_exec_module(module):
      with filtered_stderr():
        exec_module(module)

    spec.loader.exec_module = quiet_exec_module  # this spec's loader only
    return spec


class _DropMessages(logging.Filter):

  def __init__(self, messages: Sequence[str]):
    super().__init__()
    self._messages = set(messages)

  def filter(self, record: logging.LogRecord) -> bool:
    return record.msg not in self._messages


def setup(argv: Optional[Sequence[str]] = None) -> bool:
  """Silences the start-up banners unless verbose; returns whether verbose.

  Call first thing in an entry point, before clrs/tensorflow are imported::

    if __name__ == "__main__":   # before `import clrs`
      from nar_markov import quiet
      quiet.setup()

  Not verbose, it sets TF_CPP_MIN_LOG_LEVEL=1 where unset, installs an import hook that
  runs TensorFlow's import (where it is not imported yet) with file descriptor 2 captured
  and writes back every captured line but the known banners (`_BANNERS`: "All log
  messages before absl::InitializeLog() ...", absl and TensorFlow INFO lines such as
  oneDNN's and "Could not find cuda drivers", the cuFFT/cuDNN/cuBLAS registration
  notices), and drops dm-clrs's absl message "Sampling dataset on-the-fly" of every
  training stream; once per process.  Verbose (`wants_verbose`), it filters nothing: it
  sets NAR_MARKOV_VERBOSE=1, for child processes, and turns absl's Python logging up to
  INFO.

  Args:
    argv: the arguments to look for -v in; None: sys.argv[1:].
  """
  global _installed
  verbose = wants_verbose(argv)
  if verbose:
    os.environ[ENV_VERBOSE] = "1"
    from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
    absl_logging.set_verbosity(absl_logging.INFO)
    return True
  if _installed:
    return False
  _installed = True
  # TensorFlow's C++ INFO logs after absl::InitializeLog (older TF: all of them).
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
  if "tensorflow" not in sys.modules:
    sys.meta_path.insert(0, _QuietImport(["tensorflow"]))
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  # absl's own logger object (creating "absl" first with the logging module would
  # give absl a plain Logger).
  absl_logging.get_absl_logger().addFilter(_DropMessages(NOISY_ABSL_MESSAGES))
  return False
