"""Shared fixtures: one CLRS val/test cache for the whole session."""

import os
import pathlib

import pytest


@pytest.fixture(scope="session")
def data_cache_dir(tmp_path_factory) -> pathlib.Path:
  """Val/test splits are generated once per session (or reused from
  $NAR_MARKOV_TEST_CACHE, which CI may point at a persistent folder)."""
  path = os.environ.get("NAR_MARKOV_TEST_CACHE")
  if path:
    p = pathlib.Path(path)
    p.mkdir(parents=True, exist_ok=True)
    return p
  return tmp_path_factory.mktemp("clrs_cache")


@pytest.fixture(scope="session", autouse=True)
def _jax_compilation_cache(data_cache_dir):
  """Identical computations across tests compile once (persistent XLA cache)."""
  from nar_markov import train
  train.setup_compilation_cache(os.environ.get("NAR_MARKOV_JAX_CACHE")
                                or str(data_cache_dir / "jax"))
