"""The docs name only what exists: every gin binding and every command-line flag in README.md,
docs/*.md, the results READMEs and gin comments is one the code has."""

import functools
import pathlib
import re
import subprocess
import sys

import gin
import pytest

import launch.cluster  # noqa: F401  registers the launcher's slurm_resources
import launch.sweep_spec  # noqa: F401  registers the launcher's sweep_axes
from nar_markov.config import gin_files as config_lib

REPO = pathlib.Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"),
               *(REPO / "results").glob("*/README.md"), *(REPO / "gin").glob("*.gin")])
# The configurables a binding can name: what gin/base.gin imports (experiment's, netconfig's,
# lambda_heuristic's, clrs30's) and the launcher's (launch/cluster.py, launch/sweep_spec.py,
# imported above).
CONFIGURABLES = ("Protocol", "NetConfig", "GatePenalty", "LambdaHeuristic", "run_experiment",
                 "slurm_resources", "sweep_axes", "cache_dir")
_BINDING = re.compile(r"\b(" + "|".join(CONFIGURABLES) + r")\.([a-z_][a-z0-9_]*)\b")
# A command and the flags that follow it on the same line (or continued lines).
_COMMAND = re.compile(r"python3? (-m [a-z_.]+|[a-z_/]+\.py)((?:[^\n`|;&]|\\\n)*)")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9_-]*)")


def _texts():
  return {p.relative_to(REPO).as_posix(): p.read_text() for p in DOCS}


def _bindings():
  out = set()
  for name, text in _texts().items():
    out.update((name, c, p) for c, p in _BINDING.findall(text))
  return sorted(out)


@pytest.mark.parametrize("doc,configurable,param", _bindings())
def test_every_named_binding_exists(doc, configurable, param):
  config_lib.parse_gin(["gin/base.gin"], [])
  try:
    gin.parse_config(f"{configurable}.{param} = None")
  except (ValueError, TypeError) as e:
    pytest.fail(f"{doc} names {configurable}.{param}, which does not exist: {e}")
  finally:
    gin.clear_config()


def _commands():
  out = {}
  for name, text in _texts().items():
    for target, rest in _COMMAND.findall(text):
      if target in ("-m pytest", "-m venv"):
        continue
      flags = set(_FLAG.findall(rest))
      out.setdefault(target, set()).update((name, f) for f in flags)
  return out


@functools.lru_cache(maxsize=None)
def _help(target: str) -> str:
  cmd = [sys.executable] + (target.split() if target.startswith("-m") else [target])
  proc = subprocess.run(cmd + ["--help"], cwd=REPO, capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, f"{target} --help failed: {proc.stderr[-2000:]}"
  return proc.stdout


@pytest.mark.parametrize("target", sorted(_commands()))
def test_every_named_command_and_flag_exists(target):
  text = _help(target)
  missing = sorted((doc, f) for doc, f in _commands()[target]
                   if not re.search(re.escape(f) + r"\b", text))
  assert not missing, f"{target}: flags named in the docs but not in --help: {missing}"
