"""The split cache: where it lives, and its lossless file format.

`resolve_cache_dir` says which folder (argument > $NAR_MARKOV_CACHE > gin `cache_dir.path`
> ~/.cache/nar_markov); `write_cache` stores a raw split there as one .npz (hints without
their zero time padding, every array in the narrowest dtype that comes back bit for bit, a
SHA-256 over it all, written atomically) and `read_cache` gives back the very arrays, or
raises for a file that is cut short, altered or made with other settings (docs/formats.md,
"Cache").  Which file holds which split, and its regeneration: nar_markov.data.splits.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import tempfile
from typing import Any, Dict, Optional, Tuple

import clrs
import numpy as np

from nar_markov.config import clrs30
from nar_markov.data import batching

# The version of the file layout, part of every file's metadata (a file of another is
# regenerated).
CACHE_FORMAT = 1
_CACHE_ENV = "NAR_MARKOV_CACHE"


def resolve_cache_dir(path: Optional[str] = None) -> pathlib.Path:
  """The split cache folder, `~` expanded (a path; nothing is created).

  The first of `path`, $NAR_MARKOV_CACHE and gin's `cache_dir.path` that is set and not
  empty, else ~/.cache/nar_markov.
  """
  for candidate in (path, os.environ.get(_CACHE_ENV), clrs30.cache_dir()):
    if candidate:
      return pathlib.Path(candidate).expanduser()
  return pathlib.Path("~/.cache/nar_markov").expanduser()


def _narrowest(x: np.ndarray) -> np.ndarray:
  """`x` in the smallest dtype from which it comes back bit for bit."""
  if x.dtype.kind not in "fiub" or x.size == 0:
    return x
  same_size_uint = np.dtype(f"u{x.dtype.itemsize}")
  for candidate in (np.uint8, np.int8, np.uint16, np.int16, np.int32,
                    np.float32):
    if np.dtype(candidate).itemsize >= x.dtype.itemsize:
      continue
    with np.errstate(invalid="ignore", over="ignore"):
      y = x.astype(candidate)
      back = y.astype(x.dtype)
    if np.array_equal(back.view(same_size_uint), x.view(same_size_uint)):
      return y
  return x


def _digest(arrays: Dict[str, np.ndarray], meta_json: str) -> str:
  h = hashlib.sha256(meta_json.encode())
  for key in sorted(arrays):
    a = np.ascontiguousarray(arrays[key])
    h.update(f"{key}|{a.dtype.str}|{a.shape}|".encode())
    h.update(a.data)
  return h.hexdigest()


def _valid_steps(lengths: np.ndarray, T: int) -> np.ndarray:
  return np.arange(T)[:, None] < np.asarray(lengths)[None, :]  # [T, B]


def _encode(feedback: clrs.Feedback, meta: Dict[str, Any]
            ) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
  features = feedback.features
  T = batching.hint_time(feedback)
  valid = _valid_steps(features.lengths, T)
  arrays = {"lengths": _narrowest(np.asarray(features.lengths))}
  meta = dict(meta, T=T, lengths_dtype=str(features.lengths.dtype))
  for stage, points in (("input", features.inputs), ("output", feedback.outputs),
                        ("hint", features.hints)):
    entries = []
    for dp in points:
      x = np.asarray(dp.data)
      packed = False
      if stage == "hint":
        # Drop the zero padding after each trajectory's end (most of a
        # 2,048-sample split); kept only if nothing but zeros is dropped.
        steps = x[valid]
        if np.count_nonzero(steps) == np.count_nonzero(x):
          x, packed = steps, True
      arrays[f"{stage}_{dp.name}"] = _narrowest(x)
      entries.append({"name": dp.name, "location": dp.location,
                      "type": dp.type_, "dtype": str(dp.data.dtype),
                      "packed": packed})
    meta[stage] = entries
  return arrays, meta


def _decode(arrays: Dict[str, np.ndarray], meta: Dict[str, Any]
            ) -> clrs.Feedback:
  lengths = arrays["lengths"].astype(meta["lengths_dtype"])
  valid = _valid_steps(lengths, meta["T"])
  out = {}
  for stage in ("input", "output", "hint"):
    points = []
    for e in meta[stage]:
      y = arrays[f"{stage}_{e['name']}"]
      if e["packed"]:
        x = np.zeros(valid.shape + y.shape[1:], e["dtype"])
        x[valid] = y
      else:
        x = y.astype(e["dtype"])
      points.append(clrs.DataPoint(e["name"], e["location"], e["type"], x))
    out[stage] = tuple(points)
  return clrs.Feedback(clrs.Features(out["input"], out["hint"], lengths),
                       out["output"])


def write_cache(path: pathlib.Path, feedback: clrs.Feedback,
                 meta: Dict[str, Any]) -> None:
  """Writes a raw split to `path` as one cache .npz, atomically.

  Hints are stored without the zero padding past each trajectory's end (where only zeros
  are dropped), every array in the narrowest dtype that gives it back bit for bit, with
  the metadata and a SHA-256 over metadata and arrays.  The folder is created if missing;
  on any failure the temp file is removed and `path` is left as it was.

  Args:
    path: the .npz file.
    feedback: the split.
    meta: what `read_cache` is to find again (JSON-serialisable); the file's layout keys
      ("T", "lengths_dtype", "input", "output", "hint") are added to it.
  """
  arrays, meta = _encode(feedback, meta)
  meta_json = json.dumps(meta, sort_keys=True)
  digest = _digest(arrays, meta_json)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".",
                             suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      np.savez(f, __meta__=np.array(meta_json), __sha256__=np.array(digest),
               **arrays)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)  # readers see the old file or the whole new one
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def read_cache(path: pathlib.Path, expected: Dict[str, Any]) -> clrs.Feedback:
  """The split cached at `path`: the very arrays `write_cache` was given.

  Args:
    path: the .npz file.
    expected: metadata the file must hold, key by key (==).

  Raises:
    ValueError: the checksum does not match, or a key of `expected` differs.  A file that
      is missing, cut short or not such an .npz raises what numpy and zipfile raise
      (OSError, zipfile.BadZipFile, KeyError, ...).
  """
  with np.load(path, allow_pickle=False) as z:
    meta_json = str(z["__meta__"])
    stored_digest = str(z["__sha256__"])
    arrays = {k: z[k] for k in z.files if not k.startswith("__")}
  if _digest(arrays, meta_json) != stored_digest:
    raise ValueError("checksum mismatch")
  meta = json.loads(meta_json)
  for key, value in expected.items():
    if meta.get(key) != value:
      raise ValueError(f"cache {key}={meta.get(key)!r}, expected {value!r}")
  return _decode(arrays, meta)
