"""The official val/test splits of CLRS-30: their settings, their draw, and loading them.

`split_settings` and `generate_raw_split` are dm-clrs 2.0.3's dataset builder's val/test
draw (`clrs/_src/dataset.py`; the string matchers validated at their training size);
`load_split` gives a whole split, preprocessed as run.py does, from the cache
(nar_markov.data.split_cache) under `cache_path`, drawing and caching it where it is not
there or is unusable.  The departures from run.py and why: docs/formats.md.
"""

from __future__ import annotations

import pathlib
import warnings
from typing import Any, Dict, Optional, Sequence, Tuple

import clrs

from nar_markov.config import clrs30
from nar_markov.data import preprocessing
from nar_markov.data import split_cache

SPLITS = ("train", "val", "test")
# The string matchers are validated at their training size (module docstring).
_STRING_MATCHER_VAL_LENGTH = 20


def _check_split(split: str, allowed: Sequence[str] = ("val", "test")) -> str:
  if split not in allowed:
    raise ValueError(f"unknown split {split!r}; valid: {', '.join(allowed)}")
  return split


def split_settings(algorithm: str, split: str) -> Dict[str, int]:
  """seed, num_samples and length of the official draw of a val/test split."""
  clrs30.check_algorithm(algorithm)
  _check_split(split)
  official = clrs.CLRS30[split]
  length = official["length"]
  if split == "val" and algorithm in clrs30.STRING_MATCHERS:
    length = _STRING_MATCHER_VAL_LENGTH
  multiplier = clrs.CLRS_30_ALGS_SETTINGS[algorithm]["num_samples_multiplier"]
  return {"seed": official["seed"], "length": length,
          "num_samples": official["num_samples"] * multiplier}


def generate_raw_split(algorithm: str, split: str) -> clrs.Feedback:
  """The dataset builder's full draw, no preprocessing, no cache."""
  settings = split_settings(algorithm, split)
  sampler, _ = clrs.build_sampler(
      algorithm, seed=settings["seed"], num_samples=settings["num_samples"],
      length=settings["length"])
  return sampler.next(None)


def cache_path(algorithm: str, split: str,
               cache_dir: Optional[str] = None) -> pathlib.Path:
  return (split_cache.resolve_cache_dir(cache_dir) / f"clrs-{clrs.__version__}" /
          f"{clrs30.check_algorithm(algorithm)}_{_check_split(split)}.npz")


def load_split(algorithm: str, split: str, cache_dir: Optional[str] = None,
               preprocess: bool = True) -> clrs.Feedback:
  """A whole val/test split (cached); `preprocess=False`: the raw draw."""
  feedback, _ = load_raw_split(algorithm, split, cache_dir)
  if preprocess:
    feedback = preprocessing.preprocess_feedback(algorithm, feedback)
  return feedback


def load_raw_split(algorithm: str, split: str,
                   cache_dir: Optional[str] = None
                   ) -> Tuple[clrs.Feedback, str]:
  """(raw draw, 'cached' | 'generated'); regenerates a bad cache file."""
  path = cache_path(algorithm, split, cache_dir)
  expected = _cache_meta(algorithm, split)
  if path.exists():
    try:
      return split_cache.read_cache(path, expected), "cached"
    except Exception as e:  # pylint: disable=broad-except
      # Any unreadable file (truncated zip, bad checksum, other settings) is
      # rebuilt; a silently wrong test split would be far worse.
      warnings.warn(f"nar_markov cache file {path} is unusable ({e!r}); "
                    "regenerating it", RuntimeWarning, stacklevel=2)
  feedback = generate_raw_split(algorithm, split)
  split_cache.write_cache(path, feedback, expected)
  return feedback, "generated"


def _cache_meta(algorithm: str, split: str) -> Dict[str, Any]:
  return {"format": split_cache.CACHE_FORMAT, "clrs": clrs.__version__,
          "algorithm": algorithm, "split": split,
          "settings": split_settings(algorithm, split)}
