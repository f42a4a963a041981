"""The Markov rule and its record, without jax: when a run is Markov in effect at test time,
and the markov.json a measurement of its tested checkpoint writes (nar_markov/probes/evaluate.py
measures; analysis/verdict.py reads the rule)."""

from __future__ import annotations

import json
import pathlib
from typing import Any, Dict, Mapping, Optional, Tuple

from nar_markov.config import provenance
from nar_markov.store import runs
from nar_markov.store import util


# Markov in effect at test time (docs/design.md; written before any run was measured): only
# this scope hands every consumer of h(t-1) the gated history; zeroing the history moves the
# tested checkpoint's test score by less than 1 point and changes under 1 % of its output
# predictions; its gate norm there is below 0.1.
MARKOV_SCOPE = "processor_decoder"
MARKOV_MAX_DELTA = 0.01       # |score with history zeroed - score|, micro-F1 (1 point)
MARKOV_MAX_CHANGED = 0.01     # share of output predictions that change
MARKOV_MAX_GATE_NORM = 0.1    # ||g * h(t-1)||/sqrt(d) at the tested checkpoint, test split


def markov_in_effect(scope: str, delta: float, changed: float, gate_norm: float) -> bool:
  """Whether a run is Markov in effect at test time, by the rule above.

  True when `scope` is `MARKOV_SCOPE`, |delta| < `MARKOV_MAX_DELTA`, changed <
  `MARKOV_MAX_CHANGED` and gate_norm < `MARKOV_MAX_GATE_NORM`.

  Args:
    scope: the net's history scope (NetConfig.history_scope).
    delta: its test score with the history zeroed minus as trained (a fraction).
    changed: the share of output predictions that change with the history zeroed.
    gate_norm: its gate norm on the same split.
  """
  return (scope == MARKOV_SCOPE and abs(delta) < MARKOV_MAX_DELTA
          and changed < MARKOV_MAX_CHANGED and gate_norm < MARKOV_MAX_GATE_NORM)


def zeroed_config(net_config: Mapping[str, Any]) -> Dict[str, Any]:
  """`net_config` with h(t-1) replaced by zeros in every consumer.

  History 'none' under `MARKOV_SCOPE` (processor input, update residual, decoder):
  ForgetNet's forward pass (Eq. 3) on the same weights; a G-ForgetNet's gate weights go
  unused.
  """
  return dict(net_config, history="none", history_scope=MARKOV_SCOPE)


def tested_checkpoint_problem(meta: Mapping[str, Any], result: Mapping[str, Any]
                              ) -> Optional[str]:
  """Why a params.npz is not the checkpoint whose score is the run's test_score, or None.

  The tested checkpoint is run.py's first best: result.json's `val_best_step`, which must
  agree with selection.first_best.step where that is recorded.

  Args:
    meta: the params file's metadata (`params_io.load_params`): its "step" and, where
      kept, "test_score".
    result: the run's parsed result.json (empty or None: there is none).

  Returns:
    One line saying what disagrees, or None when params.npz is the tested checkpoint.
  """
  if not result:
    return "no result.json says which checkpoint was tested"
  tested = result.get("val_best_step")
  first = (result.get("selection") or {}).get("first_best") or {}
  if tested is None or first.get("step", tested) != tested:
    return (f"result.json names no one tested step (val_best_step {tested}, "
            f"selection.first_best.step {first.get('step')})")
  if meta.get("step") != tested:
    return f"params.npz holds step {meta.get('step')}, the run tested step {tested}"
  kept, recorded = meta.get("test_score"), result.get("test_score")
  if kept is not None and recorded is not None and kept != recorded:
    return f"params.npz was saved with test_score {kept}, result.json has {recorded}"
  return None


def as_the_run_was_tested(result: Mapping[str, Any], entry: Mapping[str, Any],
                          split_size: int) -> Optional[Tuple[bool, str]]:
  """Whether a score of the test split was made on the samples the run's own test used.

  The run tested the first `Protocol.test_max_samples` samples of the split (all of them
  where that is None); the entry must have that many.

  Args:
    result: the run's parsed result.json.
    entry: a score of the test split, with "num_samples" and "nb_nodes".
    split_size: the number of samples in the test split.

  Returns:
    (whether it was, a line saying so); None for a run whose result.json records no
    settings or no test_score.
  """
  settings, score = result.get("settings"), result.get("test_score")
  if not isinstance(settings, dict) or score is None:
    return None
  cap = settings.get("test_max_samples")
  tested = min(split_size, cap or split_size)
  if entry["num_samples"] == tested:
    return True, (f"  as the run's test: the test split, {entry['nb_nodes']} nodes, {tested} "
                  f"samples (its test_score {score})")
  how = (f"Protocol.test_max_samples = {cap}" if cap else "all of them")
  again = f"--max-samples {tested}" if cap else "no --max-samples"
  return False, (f"  not the run's test: its test_score {score} was on the test split, "
                 f"{entry['nb_nodes']} nodes, {tested} samples ({how}); {again} scores as "
                 "it did")


MARKOV_FIELDS = ("score", "score_history_zeroed", "delta", "predictions_changed", "gate_norm",
                 "scores", "scores_history_zeroed")


def markov_record(out: Mapping[str, Any], entry: Mapping[str, Any]) -> Dict[str, Any]:
  """The run's markov.json record (`runs.MARKOV_SCHEMA`, written to `runs.MARKOV_NAME`).

  Args:
    out: evaluate_run's answer (model, algorithm, seed, history, history_scope, step,
      result_test_score).
    entry: its score of the official test split as the run was tested, with "markov"
      (the `MARKOV_FIELDS` and markov_in_effect).

  Returns:
    The record: the run, the split, the measures, the rule's thresholds, whether the score
    reproduces result.json's test_score, and the code version that measured it.
  """
  m = entry["markov"]
  return {
      "schema": runs.MARKOV_SCHEMA,
      **{k: out[k] for k in ("model", "algorithm", "seed", "history", "history_scope")},
      "step": out["step"], "test_score": out["result_test_score"],
      "reproduces_test_score": m["score"] == out["result_test_score"],
      **{k: entry[k] for k in ("source", "nb_nodes", "num_samples")},
      **{k: m[k] for k in MARKOV_FIELDS},
      "rule": {"scope": MARKOV_SCOPE, "max_delta": MARKOV_MAX_DELTA,
               "max_changed": MARKOV_MAX_CHANGED, "max_gate_norm": MARKOV_MAX_GATE_NORM},
      "markov_in_effect": m["markov_in_effect"],
      "measured_with": provenance.code_version(),
  }


# What a replay must share with the run it stands for, for its measure to be the run's.
REPLAY_KEYS = ("model", "algorithm", "seed", "val_best_step", "test_score")


def missing_params(run_dir) -> Optional[str]:
  """Why `run_dir` has no parameters to score, in one line; None where its params.npz is there.

  No such folder (or a file); neither params.npz nor a readable result.json (not a run
  folder); or a run without params.npz (git keeps none: a committed run), with how to
  replay it -- on the CPU kind that trained it (result.json's device.host_cpu), which the
  bit-exact replay --record-for needs.
  """
  folder = pathlib.Path(run_dir)
  if not folder.is_dir():
    return f"no run folder {run_dir}" + (" (a file)" if folder.exists() else "")
  if (folder / runs.PARAMS_NAME).exists():
    return None
  result = result_of(folder)
  if result is None:
    return (f"{run_dir} has no {runs.PARAMS_NAME} and no readable {runs.RESULT_NAME}: not a run "
            "folder (<results>/<model>/<algorithm>/seed<k>/)")
  cpu = (result.get("device") or {}).get("host_cpu") or {}
  kind = (f"{cpu.get('model')}, SIMD {'/'.join(cpu.get('simd') or []) or 'unknown'}"
          if cpu else "not recorded")
  return (f"{run_dir} has no {runs.PARAMS_NAME} (git keeps none): replay the run first, "
          f"python -m nar_markov.tools.replay {run_dir} --results <folder>, and evaluate the "
          f"replay's run folder (--markov --record-for {run_dir} to record it here); a "
          f"bit-exact replay needs the CPU kind that trained it (result.json device.host_cpu: "
          f"{kind})")


def result_of(run_dir) -> Optional[dict]:
  """`run_dir`'s result.json parsed, or None where it has none that parses."""
  return runs.read_result(pathlib.Path(run_dir) / runs.RESULT_NAME)[0]


def replay_problem(run: Mapping[str, Any], replay: Mapping[str, Any]) -> Optional[str]:
  """Why `replay` is not the run it replays trained again to the bit, or None when it is.

  A replay is the run again when the run has a test_score and both agree on `REPLAY_KEYS`.

  Args:
    run: the run's parsed result.json (empty or None: it has none).
    replay: the replay's parsed result.json.

  Returns:
    One line naming what differs, or None.
  """
  if not run:
    return "it has no readable result.json"
  differ = [f"{k} {replay.get(k)!r} (the run: {run.get(k)!r})" for k in REPLAY_KEYS
            if replay.get(k) != run.get(k)]
  if run.get("test_score") is None:
    differ.insert(0, "the run has no test_score")
  if differ:
    return "the replay is not the run again: " + ", ".join(differ)
  return None


def write_markov_record(run_dir, out: Mapping[str, Any], log=print, record_for=None,
                        replay: Optional[Mapping[str, Any]] = None) -> Optional[pathlib.Path]:
  """Writes markov.json from `out` where it scored the test split as the run was tested.

  The first score of `out["scores"]` marked "as_tested" with a "markov" measurement is
  recorded (`markov_record`), atomically; where there is none, nothing is written and `log`
  says why.

  Args:
    run_dir: the run folder that was scored.
    out: evaluate_run's answer.
    log: prints one line.
    record_for: the run that `run_dir` replays; the record then goes into its folder
      instead, with "parameters_from" naming the replay.  The caller checks first that
      `replay_problem` is None.
    replay: `run_dir`'s parsed result.json if already read (else read here); used only with
      `record_for`.

  Returns:
    The path written, or None.
  """
  tested = [e for e in out["scores"] if e.get("as_tested") and "markov" in e]
  if not tested:
    log(f"  {runs.MARKOV_NAME} not written: only the official test split scored as the run "
        "was tested is the run's record")
    return None
  record = markov_record(out, tested[0])
  if record_for is not None:
    replay = (result_of(run_dir) if replay is None else replay) or {}
    record["parameters_from"] = {
        "replay": str(pathlib.Path(run_dir).resolve()),
        "replay_commit": replay.get("commit"), "replay_dirty": replay.get("dirty"),
        "why": "git keeps no params.npz: the run was trained again from its config.gin "
               "(python -m nar_markov.tools.replay) and reproduced its tested step and test_score "
               "to the bit; these are the replay's parameters"}
    run_dir = record_for
  path = pathlib.Path(run_dir) / runs.MARKOV_NAME
  runs.atomic_write_bytes(path, json.dumps(util.jsonable(record), indent=1).encode())
  log(f"wrote {path}")
  return path
