"""A trained model on disk: haiku parameters, net config and metadata in one `.npz`.

One array per parameter, keyed by its haiku path `<module name>/<parameter name>` (e.g.
`net/~_construct_encoders_decoders/algo_0_pos_enc_linear/w`), plus one entry `HEADER_KEY`:
a JSON string with the format tag, the net config (`dataclasses.asdict(NetConfig)`) and free
metadata (algorithm, model, seed, step, ...). Loading executes no code: `np.load` with
`allow_pickle=False` (an object array, which needs pickle, is refused). Writes are atomic
(temp file in the same folder + `os.replace`). numpy only: no jax needed to read a model.
"""

from __future__ import annotations

import io
import json
import math
import pathlib
import zipfile
import zlib
from typing import Any, Dict, Mapping, Tuple

import numpy as np

from nar_markov.store import runs

FORMAT = runs.PARAMS_FORMAT
HEADER_KEY = runs.PARAMS_HEADER_KEY


class UnreadableParams(ValueError):
  """A file that is not a params file of ours, was cut short, or would need pickle."""


def _json_value(x):
  """JSON-safe copy: numpy scalars/arrays to Python, non-finite floats to None."""
  if isinstance(x, Mapping):
    return {str(k): _json_value(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_json_value(v) for v in x]
  if isinstance(x, np.ndarray):
    return _json_value(x.tolist())
  if isinstance(x, np.generic):
    x = x.item()
  if isinstance(x, float) and not math.isfinite(x):
    return None
  return x


def flatten(params: Mapping[str, Mapping[str, Any]]) -> Dict[str, np.ndarray]:
  """Flattens haiku params `{module: {param: array}}` to `{'module/param': np.ndarray}`.

  Args:
    params: haiku parameters; the values may be numpy or jax arrays.

  Returns:
    One numpy array per parameter, keyed `<module>/<param>`.

  Raises:
    TypeError: a module's value is not a mapping, or a parameter is an object array.
    ValueError: a module name is empty or starts with '__', or a parameter name is empty
      or contains '/'.
  """
  flat = {}
  for module, module_params in params.items():
    if not isinstance(module_params, Mapping):
      raise TypeError(f"params[{module!r}] is a {type(module_params).__name__}, not a mapping "
                      "of parameter name -> array (haiku params)")
    if not module or module.startswith("__"):
      raise ValueError(f"module name {module!r} cannot be stored")
    for name, value in module_params.items():
      if not name or "/" in name:
        raise ValueError(f"parameter name {name!r} of {module!r} cannot be stored")
      array = np.asarray(value)
      if array.dtype.hasobject:
        raise TypeError(f"{module}/{name} is an object array")
      flat[f"{module}/{name}"] = array
  return flat


def unflatten(flat: Mapping[str, np.ndarray]) -> Dict[str, Dict[str, np.ndarray]]:
  """Inverse of `flatten`: splits each key at its last '/' into module and parameter name.

  Module names may contain '/', parameter names do not.

  Args:
    flat: `{'module/param': array}`.

  Returns:
    `{module: {param: array}}`.

  Raises:
    ValueError: a key has no module part before its last '/'.
  """
  params: Dict[str, Dict[str, np.ndarray]] = {}
  for key, value in flat.items():
    module, _, name = key.rpartition("/")
    if not module:
      raise ValueError(f"{key!r} is not a 'module/param' key")
    params.setdefault(module, {})[name] = value
  return params


def save_params(path, params, net_config: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
  """Writes a params file atomically: one entry per parameter plus the JSON header entry.

  `net_config` and `meta` are stored JSON-safe: numpy values as Python ones, non-finite
  floats as null.

  Args:
    path: the file to write (its folder is created).
    params: haiku params, numpy or jax arrays.
    net_config: the net config as a dict (`dataclasses.asdict(NetConfig)`).
    meta: free metadata (algorithm, model, seed, step, ...).

  Raises:
    TypeError, ValueError: `params` cannot be stored (`flatten`).
  """
  path = pathlib.Path(path)
  arrays = flatten(params)
  header = json.dumps(
      {"format": FORMAT, "net_config": _json_value(dict(net_config)),
       "meta": _json_value(dict(meta))}, sort_keys=True, allow_nan=False)
  arrays[HEADER_KEY] = np.array(header)  # a unicode scalar: loads without pickle
  buffer = io.BytesIO()
  np.savez(buffer, **arrays)
  runs.atomic_write_bytes(path, buffer.getvalue())


def load_params(path) -> Tuple[Dict[str, Dict[str, np.ndarray]], Dict[str, Any], Dict[str, Any]]:
  """Reads a params file written by `save_params`, executing no code (no pickle).

  Args:
    path: the `.npz` file.

  Returns:
    (params as `{module: {param: np.ndarray}}`, the net config dict, the meta dict).

  Raises:
    UnreadableParams: not an npz file, cut short, an entry that needs pickle, no header
      entry (`HEADER_KEY`), or a header of another format than `FORMAT`.
  """
  flat = {}
  try:
    with np.load(path, allow_pickle=False) as npz:
      for key in npz.files:  # read everything now, so a pickled entry fails here
        flat[key] = npz[key]
  except (ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
    raise UnreadableParams(f"{path} is not a readable parameters file ({e!r})") from None
  if HEADER_KEY not in flat:
    raise UnreadableParams(f"{path} has no {HEADER_KEY!r} entry: not a nar_markov params file")
  header = json.loads(str(flat.pop(HEADER_KEY)))
  if header.get("format") != FORMAT:
    raise UnreadableParams(f"{path}: format {header.get('format')!r}, expected {FORMAT!r}")
  return unflatten(flat), header["net_config"], header["meta"]


__all__ = ["FORMAT", "UnreadableParams", "save_params", "load_params", "flatten", "unflatten"]
