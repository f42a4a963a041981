"""The lambda calibration of one algorithm: trains the heuristic's runs and writes its record; CLI.

The heuristic itself -- its two readings, the search arithmetic, the records -- is
nar_markov/config/lambda_heuristic.py (its docstring says what the paper asks and why the
'schedule' reading is the default).  Here it is carried out: the lambda = 0 run of every
calibration seed (and under the 'constant' reading the search trials), trained with
nar_markov.training.experiment.run_experiment (which imports jax only when it trains), each
resumable from its checkpoint, then the record.

CLI:
  python -m nar_markov.training.calibrate --gin gin/gforget.gin --algorithm bfs --results R
  python -m nar_markov.training.calibrate --gin gin/gforget.gin --algorithm bfs --results R --seed 2
  python -m nar_markov.training.calibrate --show --results R
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import math
import pathlib
import statistics
import sys
from typing import Any, Dict, Optional, Sequence

from nar_markov import quiet
from nar_markov.config import components
from nar_markov.config import runspec
from nar_markov.store import runs
from nar_markov.training import experiment
from nar_markov.config.calibration_records import (
    RECORD_SCHEMA, atomic_write_json, check_results_dir, continuation_state, format_records,
    lambda0_results_dir, load_lambda, read_record, record_heuristic, record_path,
    trial_results_dir)
from nar_markov.config.lambda_heuristic import (
    CalibrationError, LambdaHeuristic, measure, search, share_with)


def log(msg: str) -> None:
  """Writes `msg` to stderr, prefixed with the module's name."""
  print(f"[nar_markov.training.calibrate] {msg}", file=sys.stderr, flush=True)


def calibrate_algorithm(algorithm: str, results_dir, heuristic: Optional[LambdaHeuristic] = None,
                        *, net=None, protocol=None,
                        only_seeds: Optional[Sequence[int]] = None) -> Optional[Dict[str, Any]]:
  """Calibrates λ for `algorithm`: trains the heuristic's runs, writes and returns its record.

  The λ = 0 run of every calibration seed (and under the 'constant' reading the search
  trials) is trained with `experiment.run_experiment` under the label "calibrate", on
  G-ForgetNet's net (history 'gated' whatever `net` says) and the protocol with
  train_steps cut to the calibration step on the same cosine horizon, each keeping its
  final state.  Resumable: finished runs are read back, a killed one resumes from its
  checkpoint.  Under 'constant', the saved states of the trials no G-ForgetNet run can
  continue from are deleted once the record is written.

  With `only_seeds`, only those calibration seeds' runs are trained and no record is
  written: several processes (cores, Slurm tasks) can share one calibration, each with its
  seeds, and the call without `only_seeds` then reads their finished runs back and writes
  the record.

  Args:
    algorithm: a CLRS-30 name.
    results_dir: the results folder the runs and the record go under.
    heuristic: the λ heuristic; None: `LambdaHeuristic()` (gin's).
    net, protocol: the components; None: gin's.
    only_seeds: train these of the heuristic's seeds only, write no record.

  Returns:
    The record (None with `only_seeds`).  A valid record there with these settings is
    returned as it is, nothing trained.

  Raises:
    CalibrationError: `results_dir` is a file; the record there is unusable or was made
      with other settings or another heuristic (never overwritten); a seed's λ = 0 run
      has a gate term G that is not > 0; a search trial there was trained with another λ
      than the search asks for; `only_seeds` not among the heuristic's seeds.
    ValueError: what `experiment.run_experiment` raises for components, an algorithm or
      results that make no run.
  """
  h = heuristic or LambdaHeuristic()
  results_dir = check_results_dir(results_dir)
  if only_seeds is not None:
    strangers = sorted(set(int(k) for k in only_seeds) - set(h.seeds))
    if strangers or not only_seeds:
      raise CalibrationError(
          f"seeds {strangers or list(only_seeds)} are not calibration seeds of {algorithm} "
          f"(LambdaHeuristic.seeds = {list(h.seeds)})")
  c = components.unchecked(**{k: v for k, v in (("net", net), ("protocol", protocol))
                             if v is not None})
  net = dataclasses.replace(c["net"], history="gated")
  protocol = c["protocol"]
  # The λ = 0 runs' own components (their penalty's strength is not in the record).
  settings = runspec.record_settings(runspec.settings_of(algorithm, components.Experiment(
      model="calibrate", net=net, protocol=protocol,
      penalty=components.GatePenalty(0.0, start_step=0))))
  schedule_steps = settings["schedule_steps"]
  path = record_path(results_dir, h.reading, algorithm, net.history_scope)
  existing = read_record(path)
  if existing is not None:
    load_lambda(results_dir, algorithm, h, settings)  # raises if other settings
    log(f"{path} exists with these settings: λ = {existing['lambda']:.6g}")
    return None if only_seeds is not None else existing
  step = h.calibration_step(schedule_steps)
  window = h.window_steps(schedule_steps)
  calibration = _Calibration(
      algorithm=algorithm, results_dir=results_dir, heuristic=h, scope=net.history_scope,
      step=step, window=window,
      common=dict(algorithm=algorithm, model="calibrate", net=net,
                  protocol=dataclasses.replace(protocol, train_steps=step,
                                               schedule_steps=schedule_steps)))
  log(f"{algorithm}: {h.reading} reading, calibration step {step} of "
      f"{schedule_steps}, window {window} steps, seeds {list(h.seeds)}")
  seeds = h.seeds if only_seeds is None else [int(k) for k in only_seeds]
  per_seed = [calibration.seed_entry(seed) for seed in seeds]
  if only_seeds is not None:
    log(f"{algorithm}: the λ = 0 runs of seeds {seeds} are done; the calibration of all its "
        "seeds writes the record")
    return None
  record = _record(algorithm, h, schedule_steps, settings, per_seed)
  atomic_write_json(path, record)
  log(f"wrote {path}: λ = {record['lambda']:.6g} (median over seeds {list(h.seeds)}), "
      f"status {record['status']}")
  if h.reading == "constant":
    _remove_unused_trial_states(record)
  return record


@dataclasses.dataclass(frozen=True)
class _Calibration:
  """One algorithm's calibration runs: where they go and what they train (`common`:
  run_experiment's keywords shared by the λ = 0 runs and the search trials)."""
  algorithm: str
  results_dir: pathlib.Path
  heuristic: LambdaHeuristic
  scope: str
  step: int
  window: int
  common: Dict[str, Any]

  def seed_entry(self, seed: int) -> Dict[str, Any]:
    """The record's entry for `seed`: its λ = 0 run, and under 'constant' its search."""
    base_dir = lambda0_results_dir(self.results_dir, self.scope)
    base = experiment.run_experiment(seed=seed, results_dir=str(base_dir),
                                     penalty=components.GatePenalty(0.0, start_step=0),
                                     save_final_state=True,
                                     **self.common)[self.algorithm][seed]
    m0 = measure(base, self.step, self.window)
    if not m0["G"] > 0:
      raise CalibrationError(f"{self.algorithm} seed {seed}: gate term G = {m0['G']}; "
                             "cannot calibrate")
    h = self.heuristic
    entry = {"seed": seed, "lambda0": m0["L"] / m0["G"], "at_lambda0": m0,
             **self._run_files(base_dir, seed)}
    if h.reading == "schedule":
      entry["lambda"] = entry["lambda0"]
      return entry
    trials, chosen, in_band = search(functools.partial(self.trial, seed=seed),
                                     entry["lambda0"], h.band, h.max_trials, h.bracket_factor)
    # The chosen trial is the first `step` steps of this seed's G-ForgetNet run with
    # that λ (same seed, data and schedule, λ from step 0): the run continues from its
    # state (nar_markov.training.train, reuse_calibration_prefix) when its λ is the record's.
    entry.update({"lambda": chosen["lambda"], "trials": trials, "in_band": in_band,
                  "share_reached": chosen["share"], "chosen_trial": chosen["trial"],
                  "chosen_state": chosen.get("final_state")})
    if not in_band:
      log(f"WARNING: {self.algorithm} seed {seed}: the penalty share never reached the band "
          f"{h.band} in {len(trials)} trials; using the closest trial, λ = "
          f"{chosen['lambda']:.6g} (share {chosen['share']:.3f})")
    return entry

  def trial(self, i: int, lam: float, *, seed: int) -> Dict[str, Any]:
    """Search trial i of `seed` under the 'constant' reading: trained with λ = lam from step 0."""
    trial_dir = trial_results_dir(self.results_dir, self.algorithm, seed, i, self.scope)
    # One λ from step 0, as the record says of its trials, whatever ramp,
    # adaptation or multiplier the sweep's gin binds for the runs that read it.
    trial_penalty = components.GatePenalty(lam, start_step=0, lambda_scale=1.0,
                                        ramp_steps=0, adaptive_every_steps=None)
    res = experiment.run_experiment(seed=seed, results_dir=str(trial_dir),
                                    penalty=trial_penalty, save_final_state=True,
                                    **self.common)[self.algorithm][seed]
    if not math.isclose(res["lambda_gate"], lam, rel_tol=1e-9):
      raise CalibrationError(
          f"{trial_dir}: trial {i} was trained with λ = {res['lambda_gate']}, the "
          f"search now asks for {lam} (other settings?); move it aside")
    files = self._run_files(trial_dir, seed)
    if res["status"] == "diverged" and res["diverged_step"] <= self.step:
      log(f"{self.algorithm} seed {seed} trial {i}: λ = {lam:.6g} diverged at step "
          f"{res['diverged_step']}: counted as above the band")
      return {"share": None, "status": "diverged", "steps": res["steps"],
              "diverged_step": res["diverged_step"], "run_dir": files["run_dir"]}
    out = {**measure(res, self.step, self.window), **files}
    log(f"{self.algorithm} seed {seed} trial {i}: λ = {lam:.6g} -> penalty share "
        f"{out['share']:.3f} (L {out['L']:.4g}, G {out['G']:.4g})")
    return out

  def _run_files(self, results_dir, seed: int) -> Dict[str, str]:
    """Where a calibration run of `seed` under `results_dir` is, and its saved final state."""
    folder = runs.run_dir(results_dir, "calibrate", self.algorithm, seed)
    return {"run_dir": str(folder), "final_state": str(folder / runs.FINAL_STATE_NAME)}


def _record(algorithm: str, h: LambdaHeuristic, schedule_steps: int,
            settings: Dict[str, Any], per_seed) -> Dict[str, Any]:
  """The calibration record: λ the median of the seeds' λ, and each seed's share at the switch."""
  lam = float(statistics.median(e["lambda"] for e in per_seed))
  for e in per_seed:
    # The penalty's share at the calibration step with the chosen λ: with the
    # λ = 0 run's L and G (schedule: exactly 1/2 for a seed whose λ is the median).
    e["share_at_switch"] = share_with(lam, e["at_lambda0"])
  status = "done"
  if h.reading == "constant" and not all(e["in_band"] for e in per_seed):
    status = "closest"
  shares = [e["share_at_switch"] if h.reading == "schedule" else e["share_reached"]
            for e in per_seed]
  return {
      "schema": RECORD_SCHEMA, "algorithm": algorithm, "lambda": lam, "status": status,
      **record_heuristic(h, schedule_steps),
      "share": float(statistics.median(shares)),
      "settings": settings,
      "seeds": per_seed,
      "created": datetime.datetime.now().isoformat(timespec="seconds"),
  }


def _remove_unused_trial_states(record: Dict[str, Any]) -> None:
  """Delete the saved states of the search trials no G-ForgetNet run can continue from
  (all but each seed's `continuation_state`): one parameter set each."""
  for entry in record["seeds"]:
    keep = continuation_state(record, entry)
    for t in entry.get("trials", []):
      state = t.get("final_state")
      if state and state != keep:
        pathlib.Path(state).unlink(missing_ok=True)


def calibrate_from_gin(gin_files: Sequence[str], gin_params: Sequence[str], *,
                       algorithm: str, results_dir: str,
                       only_seeds: Optional[Sequence[int]] = None) -> Optional[str]:
  """A sweep's calibration job: parses gin afresh, calibrates `algorithm`, returns the record path.

  The gin is `gin_files`, then `gin_params`; `calibrate_algorithm` under `results_dir`
  with gin's heuristic and components (with `only_seeds`: those seeds' runs only, and
  None returned).
  """
  from nar_markov.config import gin_files as config_lib  # pylint: disable=g-import-not-at-top
  config_lib.parse_gin(gin_files, gin_params)
  h = LambdaHeuristic()
  record = calibrate_algorithm(algorithm, results_dir, h, only_seeds=only_seeds)
  if record is None:
    return None
  return str(record_path(results_dir, h.reading, algorithm,
                         record["settings"].get("history_scope")))


def main(argv=None) -> int:
  """The command line (module docstring); returns the exit status.

  Returns:
    0, or 2 for a CalibrationError, said in one line on stderr (argparse exits with 2 for
    a usage error).
  """
  quiet.setup(argv)  # before training imports clrs/tensorflow: no start-up banners
  parser = argparse.ArgumentParser(prog="python -m nar_markov.training.calibrate",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--gin", action="append", default=[], metavar="FILE")
  parser.add_argument("--gin_param", action="append", default=[], metavar="BINDING")
  parser.add_argument("--algorithm", action="append", default=[],
                      help="algorithm to calibrate (repeatable)")
  parser.add_argument("--results", default=runs.DEFAULT_RESULTS)
  parser.add_argument("--seed", action="append", type=int, default=None, metavar="K",
                      help="train only this calibration seed's runs, write no record "
                           "(repeatable; a run without --seed reads them back)")
  parser.add_argument("--show", action="store_true", help="list the records and exit")
  quiet.add_flag(parser)
  args = parser.parse_args(argv)
  try:
    results = check_results_dir(args.results)
    if args.show:
      print(format_records(results))
      return 0
    if not args.gin or not args.algorithm:
      parser.error("--gin and --algorithm are required (or --show)")
    for algorithm in args.algorithm:
      path = calibrate_from_gin(args.gin, args.gin_param, algorithm=algorithm,
                                results_dir=str(results), only_seeds=args.seed)
      if path is not None:
        print(path)
  except CalibrationError as e:
    print(f"calibrate: error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
