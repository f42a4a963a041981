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
  """The seed, num_samples and length of the official draw of a val/test split.

  The dataset builder's (clrs.CLRS30[split], num_samples times the algorithm's
  num_samples_multiplier), but the string matchers' val split is at length 20, their
  training size.

  Raises:
    ValueError: an unknown algorithm, or a split other than "val" and "test".
  """
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
  """The dataset builder's full draw of a val/test split (`split_settings`).

  No preprocessing, no cache.
  """
  settings = split_settings(algorithm, split)
  sampler, _ = clrs.build_sampler(
      algorithm, seed=settings["seed"], num_samples=settings["num_samples"],
      length=settings["length"])
  return sampler.next(None)


def cache_path(algorithm: str, split: str,
               cache_dir: Optional[str] = None) -> pathlib.Path:
  """The cache file of a val/test split (a path; nothing is created).

  `<cache dir>/clrs-<clrs version>/<algorithm>_<split>.npz`, the cache dir
  `split_cache.resolve_cache_dir(cache_dir)`.

  Raises:
    ValueError: an unknown algorithm, or a split other than "val" and "test".
  """
  return (split_cache.resolve_cache_dir(cache_dir) / f"clrs-{clrs.__version__}" /
          f"{clrs30.check_algorithm(algorithm)}_{_check_split(split)}.npz")


def load_split(algorithm: str, split: str, cache_dir: Optional[str] = None,
               preprocess: bool = True) -> clrs.Feedback:
  """A whole val/test split, from the cache or drawn and cached (`load_raw_split`).

  Args:
    algorithm: a CLRS-30 name.
    split: "val" or "test".
    cache_dir: the cache folder (`split_cache.resolve_cache_dir`).
    preprocess: run.py's preprocessing (`preprocessing.preprocess_feedback`, `pos` as
      drawn); False: the raw draw.
  """
  feedback, _ = load_raw_split(algorithm, split, cache_dir)
  if preprocess:
    feedback = preprocessing.preprocess_feedback(algorithm, feedback)
  return feedback


def load_raw_split(algorithm: str, split: str,
                   cache_dir: Optional[str] = None
                   ) -> Tuple[clrs.Feedback, str]:
  """The raw draw of a val/test split, read from its cache file or drawn and cached.

  Returns:
    (feedback, how): how is "cached" where `cache_path`'s file was read, "generated"
    where the split was drawn and written there.  A cache file that does not read back
    (any exception: cut short, a bad checksum, other settings) is drawn again and
    overwritten, with a RuntimeWarning.

  Raises:
    ValueError: an unknown algorithm, or a split other than "val" and "test".
  """
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
