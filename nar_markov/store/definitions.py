"""What defines a run, compared: whether a recorded run (a result.json, a checkpoint's
definition, a calibration record's settings) was made with the definition expected of it.

Imports no jax. The results store (nar_markov.store.runs: done-ness), the checkpoints
(nar_markov.store.state_files), the calibration records and the run's settings
(nar_markov.config) compare through it.
"""

from __future__ import annotations

import math
from typing import Any, List, Mapping, Sequence, Tuple


def normalize(value):
  """A setting as compared: tuples and lists as lists (recursively), integral floats as ints."""
  if isinstance(value, (list, tuple)):
    return [normalize(v) for v in value]
  if isinstance(value, float) and value.is_integer():
    return int(value)
  return value


def same_value(a, b) -> bool:
  """Whether two settings are equal as compared: after `normalize`, numbers to 1e-12, else ==.

  Numbers are compared with a relative tolerance of 1e-12; bools are compared by ==.
  """
  a, b = normalize(a), normalize(b)
  if (isinstance(a, (int, float)) and isinstance(b, (int, float))
      and not isinstance(a, bool) and not isinstance(b, bool)):
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)
  return a == b


def definition_mismatch(recorded: Mapping[str, Any], expected: Mapping[str, Any]
                        ) -> List[Tuple[str, Any, Any]]:
  """The defining values in which a recorded run differs from the definition expected of it.

  Args:
    recorded: the recorded run (a result.json, or a checkpoint's definition).
    expected: the run's definition (``runspec.run_definition`` with the seed: model,
      algorithm, history, seed, lambda_gate, lambda_reading, penalty_start_step, and
      "settings").  Only its top-level keys are compared: one absent from it is not (the
      sweep does not know λ before its algorithm is calibrated).  "settings" is compared
      key by key over the keys of both sides; a key missing on one side is None there
      (``runspec.run_settings`` records most settings only where they differ from their
      defaults).

  Returns:
    (name, recorded value, expected value) for each value that differs (`same_value`).
  """
  out = []
  for key, want in expected.items():
    if key == "settings":
      theirs = recorded.get("settings")
      theirs = theirs if isinstance(theirs, Mapping) else {}
      for k in list(want) + [k for k in theirs if k not in want]:
        if not same_value(theirs.get(k), want.get(k)):
          out.append((k, theirs.get(k), want.get(k)))
    elif not same_value(recorded.get(key), want):
      out.append((key, recorded.get(key), want))
  return out


def format_mismatch(diffs: Sequence[Tuple[str, Any, Any]], theirs: str = "result",
                    ours: str = "this run") -> str:
  """`definition_mismatch`'s diffs in one line: `<key>: <theirs> <a>, <ours> <b>; ...`."""
  return "; ".join(f"{k}: {theirs} {a!r}, {ours} {b!r}" for k, a, b in diffs)
