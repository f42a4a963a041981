"""Tests' shorthand: a run's settings as flat keywords (hidden_size=16, train_steps=20,
lambda_gate=0.1, ...), turned into run_experiment's label and components."""

import contextlib
import dataclasses
from typing import Any, Dict, List

from nar_markov.config import components as components_lib
from nar_markov.config import runspec
from nar_markov.config.netconfig import NetConfig
from nar_markov.training import experiment

NET_FIELDS = {f.name for f in dataclasses.fields(NetConfig)}
PROTOCOL_FIELDS = {f.name for f in dataclasses.fields(components_lib.Protocol)}


def components(**flat) -> Dict[str, Any]:
  """run_experiment's keywords from flat ones.  The history and whether there
  is a gate penalty follow the paper's label (`model`) unless given
  (`history=`, `penalty=`); `lambda_gate` goes to the GatePenalty."""
  flat = dict(flat)
  net = {k: flat.pop(k) for k in list(flat) if k in NET_FIELDS}
  protocol = {k: flat.pop(k) for k in list(flat) if k in PROTOCOL_FIELDS}
  model = flat.get("model", "")
  base = model[:-len("_multitask")] if model.endswith("_multitask") else model
  history, has_penalty = components_lib.PAPER_LABELS.get(base, ("full", "lambda_gate" in flat))
  net.setdefault("history", history)
  lam = flat.pop("lambda_gate", None)
  if "penalty" not in flat:
    flat["penalty"] = components_lib.GatePenalty(lam) if has_penalty else None
  return dict(flat, net=NetConfig(**net), protocol=components_lib.Protocol(**protocol))


def run(stop_after_steps=None, **flat):
  """experiment.run_experiment with flat keywords: {algorithm: {seed: result}}.
  `stop_after_steps`: the loop stops (as if killed) after that many steps, leaving its
  checkpoint and no result."""
  with (contextlib.nullcontext() if stop_after_steps is None
        else stopped_after(stop_after_steps)):
    return experiment.run_experiment(**components(**flat))


def run_one(**flat):
  """`run` of one algorithm for one seed: that run's result."""
  (by_seed,) = run(**flat).values()
  (result,) = by_seed.values()
  return result


def stopped_after(steps: int):
  """Training loops started inside stop after `steps` steps (or at their end)."""
  from nar_markov.training import train  # pylint: disable=g-import-not-at-top  (jax)
  return train.stop_after(steps)


def gin_key(name: str) -> str:
  """The gin binding key of a flat keyword."""
  if name in NET_FIELDS:
    return f"NetConfig.{name}"
  if name in PROTOCOL_FIELDS:
    return f"Protocol.{name}"
  if name == "lambda_gate":
    return "GatePenalty.lambda_gate"
  return f"run_experiment.{name}"


def gin_params(**flat) -> List[str]:
  """Gin bindings of flat keywords (model, history and penalty left to the gin file)."""
  return [f"{gin_key(k)}={v!r}" for k, v in flat.items()]


def settings(algorithm: str, **flat) -> Dict[str, Any]:
  """runspec.run_settings of `algorithm` with flat keywords."""
  c = components(**flat)
  return runspec.run_settings(algorithm, c["protocol"], c["net"], penalty=c["penalty"])
