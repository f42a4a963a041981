"""The verdict's Markov columns: a run's markov.json, checked against the checkpoint it
tested (`read_markov`), and the rule's call over the seeds of one arm on one algorithm
(`markov_columns`: nar_markov.markov.rule.markov_in_effect, on the full history scope only).
Imports no jax."""

import re

import numpy as np

from nar_markov.config import netconfig  # no jax
from nar_markov.markov import rule  # no jax: the Markov rule
from nar_markov.store import runs as runs_lib  # no jax

FULL_SCOPE = rule.MARKOV_SCOPE                  # every consumer of h(t-1) gated
assert FULL_SCOPE in netconfig.HISTORY_SCOPES
NOT_MEASURED = "not measured (no parameters here)"
DEFAULT_SCOPE = netconfig.NetConfig().history_scope  # what a config that binds none ran
_SCOPE = re.compile(r"NetConfig\.history_scope\s*=\s*'(\w+)'")


def history_scope(run):
  """The run's NetConfig.history_scope, from its saved config (the default when unbound)."""
  found = _SCOPE.search(run.get("gin_config") or "")
  return found.group(1) if found else DEFAULT_SCOPE


def read_markov(folder, run):
  """`folder`'s markov.json, if it measured the checkpoint `run` tested.

  Returns:
    The record, or None where there is none.

  Raises:
    ValueError: (one line) a record of another checkpoint (step and test score differ
      from the run's), or an unreadable one.
  """
  record = runs_lib.read_markov(folder)
  if record is None:
    return None
  if (record.get("step"), record.get("test_score")) != (run.get("val_best_step"),
                                                        run.get("test_score")):
    raise ValueError(f"{folder}/{runs_lib.MARKOV_NAME} measured step {record.get('step')} "
                     f"(test_score {record.get('test_score')}), the run tested step "
                     f"{run.get('val_best_step')} (test_score {run.get('test_score')}): "
                     "measure it again")
  return record


def markov_columns(gated):
  """The Markov columns of one arm on one algorithm.

  Args:
    gated: `_scores`'s dict of the arm.

  Returns:
    markov: the rule's answer ("no (scope ...)" where a seed ran another history scope
    than the full one; NOT_MEASURED where no seed is measured; "no" where a measured seed
    is not Markov; "not called (...)" where some seeds are not measured; else "yes");
    markov_seeds, the measured seeds; and the means over them of Δ (points), changed
    predictions (%) and the gate norm at test (NaN where none is measured).
  """
  scopes = {v[2] for v in gated.values()}
  measured = {s: v[3] for s, v in gated.items() if v[3] is not None}
  cols = {"markov_seeds": ",".join(map(str, sorted(measured))),
          "markov_delta": np.nan, "markov_changed": np.nan, "markov_gate_norm": np.nan}
  if measured:
    cols.update(
        markov_delta=100.0 * np.mean([m["delta"] for m in measured.values()]),
        markov_changed=100.0 * np.mean([m["predictions_changed"] for m in measured.values()]),
        markov_gate_norm=np.mean([m["gate_norm"] for m in measured.values()]))
  if scopes != {FULL_SCOPE}:
    cols["markov"] = f"no (scope {', '.join(sorted(scopes))})"
    return cols
  if not measured:
    cols["markov"] = NOT_MEASURED
    return cols
  markov = {s: rule.markov_in_effect(FULL_SCOPE, m["delta"], m["predictions_changed"],
                                         m["gate_norm"]) for s, m in measured.items()}
  missing = sorted(set(gated) - set(measured))
  if not all(markov.values()):
    cols["markov"] = "no"
  elif missing:
    cols["markov"] = (f"not called (seed{'s' * (len(missing) > 1)} "
                      f"{','.join(map(str, missing))} not measured: no parameters here)")
  else:
    cols["markov"] = "yes"
  return cols
