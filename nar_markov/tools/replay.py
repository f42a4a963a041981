"""Replay a finished run from its folder: its config.gin, trained again into another results folder.

A run folder ``<results>/<model>/<algorithm>/seed<k>/`` keeps the config.gin it was
trained with beside its result.json.  `check_folder` parses that config.gin alone with
this code and asks nar_markov.store.runs whether the result it holds is done with the run
definition the gin gives (model, history, settings, λ: `runs.check_result`, as the sweep
asks) -- the folder then says everything needed to train the run again.  `replay` trains
it (experiment.run_from_gin: the same label, algorithm(s) and seed) into another results
folder, with the λ calibration record the run read copied along.

CLI:
  python -m nar_markov.tools.replay results/pilot/forget/insertion_sort/seed0 --results R
  python -m nar_markov.tools.replay <run folder> --results R --dry-run   # check, print the plan
Errors (a folder without config.gin or result.json, an empty config.gin, one that does not
give the result's run) are one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import shutil
import sys
from typing import Any, Dict, List, Optional, Sequence

from nar_markov import quiet
from nar_markov.config import gin_files as config_lib
from nar_markov.store import runs


class ReplayError(ValueError):
  """A run folder that cannot be replayed (one line, for the CLI)."""


@dataclasses.dataclass(frozen=True)
class Plan:
  """What a replay trains: the run of `folder`, as its config.gin gives it (`check_folder`).

  Attributes:
    folder: the run folder.
    result: its result.json.
    source_root: the results folder it was trained into.
    definition: the run definition its config.gin gives (`runspec.definition_of`).
    record: the λ calibration record the run reads, or None.
  """
  folder: pathlib.Path
  result: Dict[str, Any]
  source_root: pathlib.Path
  definition: Dict[str, Any]
  record: Optional[pathlib.Path]  # the λ calibration record the run reads, if any

  @property
  def model(self) -> str:
    """The run's label."""
    return self.result["model"]

  @property
  def algorithms(self) -> List[str]:
    """The algorithms its processor trains: a multi-task run's all, else its one."""
    return list(self.result.get("multitask_algorithms") or [self.result["algorithm"]])

  @property
  def multitask(self) -> bool:
    """Whether the label is a multi-task one."""
    from nar_markov.config import components  # pylint: disable=g-import-not-at-top
    return self.model.endswith(components.MULTITASK_SUFFIX)

  def target(self, results_dir) -> pathlib.Path:
    """The run's folder under `results_dir`: where the replay's result goes."""
    return runs.run_dir(results_dir, self.model, self.result["algorithm"], self.result["seed"])


def read_folder(folder) -> Dict[str, Any]:
  """The result.json of a finished run folder.

  Raises:
    ReplayError: `folder` is not a folder; it has no config.gin or result.json, or an
      empty config.gin; its result.json is not usable (`runs.read_result`) or names
      another model, algorithm or seed than the folder's place says.
  """
  folder = pathlib.Path(folder).absolute()
  if not folder.is_dir():
    raise ReplayError(f"{folder} is not a folder")
  for name in (runs.CONFIG_NAME, runs.RESULT_NAME):
    if not (folder / name).is_file():
      raise ReplayError(f"{folder} has no {name}: not a finished run folder")
  if not (folder / runs.CONFIG_NAME).read_text(encoding="utf-8", errors="replace").strip():
    # Parsed, it would bind nothing: gin's "required" placeholder would stand for the model.
    raise ReplayError(f"{folder / runs.CONFIG_NAME} is empty: it does not say how the run "
                      "was trained")
  result, problems = runs.read_result(folder / runs.RESULT_NAME)
  if problems:
    raise ReplayError(f"{folder / runs.RESULT_NAME}: " + "; ".join(problems))
  where = runs.run_dir(folder.parents[2], result["model"], result["algorithm"], result["seed"])
  if where.resolve() != folder.resolve():
    raise ReplayError(f"{folder} holds the result of {result['model']}/"
                      f"{result['algorithm']}/seed{result['seed']}: not its own folder")
  return result


def check_folder(folder) -> Plan:
  """The replay plan of `folder`, once its config.gin is found to give the run it records.

  The config.gin is parsed alone with this code (into this process's gin state); it gives
  the run where `runs.check_result` of its definition (`components.resolve`,
  `runspec.definition_of`) finds the result done or diverged; params.npz is not needed.

  Raises:
    ReplayError: as `read_folder`; the config.gin does not parse or resolve with this
      code, or gives another run.
  """
  from nar_markov.config import components  # pylint: disable=g-import-not-at-top
  from nar_markov.config import calibration_records  # pylint: disable=g-import-not-at-top
  from nar_markov.config import lambda_heuristic  # pylint: disable=g-import-not-at-top
  from nar_markov.config import runspec  # pylint: disable=g-import-not-at-top
  folder = pathlib.Path(folder).absolute()
  result = read_folder(folder)
  root = folder.parents[2]
  try:
    config_lib.parse_gin([str((folder / runs.CONFIG_NAME).resolve())])
    algorithms = result.get("multitask_algorithms") or [result["algorithm"]]
    exp = components.resolve()
    definition = runspec.definition_of(result["algorithm"], exp, root, algorithms)
    penalty = exp.penalty
  except ValueError as e:
    raise ReplayError(f"{folder / runs.CONFIG_NAME} does not parse with this code: "
                      + str(e).splitlines()[0]) from e
  # Replay trains the run again: the parameters it kept (params.npz) are not needed.
  verdict = runs.check_result(folder, definition, files=False)
  if not verdict.done:
    raise ReplayError(f"{folder / runs.CONFIG_NAME} does not give the run of its "
                      f"result.json ({verdict.state}): {verdict.detail}")
  record = None
  if runspec.needs_calibration(penalty):
    h = lambda_heuristic.LambdaHeuristic()
    record = calibration_records.record_path(root, h.reading, result["algorithm"],
                                          definition["settings"].get("history_scope"))
  return Plan(folder, result, root, definition, record)


def copy_record(plan: Plan, results_dir) -> Optional[pathlib.Path]:
  """Copies the run's calibration record to the same place under `results_dir`.

  That is where the replayed run reads λ.

  Returns:
    The copy's path (an identical file there is kept), or None where the run reads no
    record.

  Raises:
    ReplayError: another file is there already (never replaced).
  """
  if plan.record is None:
    return None
  target = pathlib.Path(results_dir) / plan.record.relative_to(plan.source_root)
  if target.exists():
    if target.read_bytes() != plan.record.read_bytes():
      raise ReplayError(f"{target} exists and is another calibration record than "
                        f"{plan.record}: replay into another results folder")
    return target
  target.parent.mkdir(parents=True, exist_ok=True)
  shutil.copyfile(plan.record, target)
  return target


def describe(plan: Plan, results_dir) -> str:
  """The plan in a few lines, for the command line.

  The run, its config.gin, the folder it goes to, and where they apply its algorithms,
  its λ record and the code version it was trained at.
  """
  r = plan.result
  lines = [f"run       {plan.model}/{r['algorithm']}/seed{r['seed']} ({r['status']}, "
           f"test_score {r['test_score']}, {r['steps']} steps)",
           f"from      {plan.folder / runs.CONFIG_NAME} (parses; gives this result's run)",
           f"into      {plan.target(results_dir)}"]
  if plan.multitask:
    lines.append(f"with      {', '.join(plan.algorithms)} (one multi-task processor)")
  if plan.record is not None:
    lines.append(f"lambda    {r.get('lambda_gate')} from {plan.record} "
                 "(copied to the same place under the new results folder)")
  if r.get("commit"):
    lines.append(f"code      trained at {r['commit']}{' (dirty)' if r.get('dirty') else ''}")
  return "\n".join(lines)


def replay(folder, results_dir) -> Dict[str, Any]:
  """Trains the run of `folder` again into `results_dir`, its calibration record copied along.

  Returns:
    The new result.json.

  Raises:
    ReplayError: as `check_folder`, `check_target` and `copy_record`, or the replay wrote
      no usable result; and what training raises (`experiment.run_from_gin`).
  """
  from nar_markov.training import experiment  # pylint: disable=g-import-not-at-top
  plan = check_folder(folder)
  check_target(plan, results_dir)
  copy_record(plan, results_dir)
  r = plan.result
  experiment.run_from_gin([str((plan.folder / runs.CONFIG_NAME).resolve())], [],
                          algorithms=plan.algorithms, seeds=[r["seed"]],
                          results_dir=str(results_dir), multitask=plan.multitask)
  new, problems = runs.read_result(plan.target(results_dir) / runs.RESULT_NAME)
  if problems:
    raise ReplayError(f"the replay wrote no usable result: {'; '.join(problems)}")
  return new


def check_target(plan: Plan, results_dir) -> None:
  """Checks that a replay may write into `results_dir`.

  Raises:
    ReplayError: it is the run's own results folder, or a sweep could not write there
      (`runs.check_results_folder`).
  """
  if pathlib.Path(results_dir).resolve() == plan.source_root.resolve():
    raise ReplayError(f"--results {results_dir} is the run's own results folder: "
                      "replay into another one")
  try:
    runs.check_results_folder(results_dir)
  except ValueError as e:
    raise ReplayError(str(e)) from e


def main(argv: Optional[Sequence[str]] = None) -> int:
  """The command line (module docstring); returns the exit status.

  Returns:
    0, or 2 for a ReplayError, said in one line on stderr.
  """
  quiet.setup(argv)  # before training imports clrs/tensorflow: no start-up banners
  parser = argparse.ArgumentParser(prog="python -m nar_markov.tools.replay",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("folder", help="a finished run folder: <results>/<model>/<algorithm>/seed<k>")
  parser.add_argument("--results", required=True,
                      help="the results folder to train the run into (not its own)")
  parser.add_argument("--dry-run", action="store_true",
                      help="only check that config.gin parses and gives the result's run; "
                      "print the plan")
  quiet.add_flag(parser)
  args = parser.parse_args(argv)
  try:
    plan = check_folder(args.folder)
    check_target(plan, args.results)
    print(describe(plan, args.results))
    if args.dry_run:
      return 0
    new = replay(args.folder, args.results)
  except ReplayError as e:
    print(f"replay: error: {e}", file=sys.stderr)
    return 2
  old = plan.result["test_score"]
  same = new["test_score"] == old
  print(f"test_score {new['test_score']} (recorded {old}: "
        f"{'the same' if same else 'differs'})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
