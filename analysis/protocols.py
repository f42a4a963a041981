"""Which protocol a run trained under, and the groups of runs that share one.

A table compares models, so every cell of it must come from the same protocol: the training
settings (steps, schedule, batch, learning rate, clipping, train sizes, validation mode) and
the net's architecture (hidden size, processor, triplet features, ...). What tells the models
and their variants apart (the history policy and its scope, the gate, the penalty) is not
protocol: those are the columns of a table. A run's protocol is read from its result.json
`settings` record (nar_markov.config.runspec.run_settings), with the top-level fields and then the
configurables' defaults for what an older record leaves out.
"""

import dataclasses
import json

from nar_markov.config import clrs30  # no jax
from nar_markov.config import components  # no jax
from nar_markov.config import netconfig  # no jax
from nar_markov.config import runspec  # no jax

# What a model label (and its variants) is, not how it was trained.
MODEL_SETTINGS = frozenset(
  {"algorithm", "algorithms", "history", "history_scope", "gate_mlp_layers", "gate_bias_init",
   "lambda_gate", "start_step", *runspec.PENALTY_SETTINGS}
)
# Settings recorded outside `settings` in results of any version, read when it lacks them.
_TOP_LEVEL = ("train_steps", "batch_size", "learning_rate", "hidden_size", "schedule_steps",
              "train_lengths", "validation_mode")
_NOT_PROTOCOL = frozenset(
  {*runspec._NOT_DEFINING, "impl", "remat", "xla_heap_mib", "val_max_samples",  # how, not what
   "test_max_samples", "val_batch_size", "test_batch_size", "eval_every_steps",
   "log_every_steps"}
)


def _defaults():
  out = {}
  for cls in (components.Protocol, netconfig.NetConfig):
    for f in dataclasses.fields(cls):
      if f.name not in MODEL_SETTINGS and f.name not in _NOT_PROTOCOL:
        out[f.name] = f.default
  return out


DEFAULTS = _defaults()
PROTOCOL_KEYS = tuple(DEFAULTS)


def _plain(value):
  """A setting as a hashable, comparable value (lists as tuples, ints as ints)."""
  if isinstance(value, (list, tuple)):
    return tuple(_plain(v) for v in value)
  if isinstance(value, dict):
    return tuple(sorted((k, _plain(v)) for k, v in value.items()))
  return value


def protocol(run):
  """{setting: value} of the protocol `run` (a result dict) trained under.

  Each setting of PROTOCOL_KEYS from the `settings` record, else the top-level field, else
  the configurable's default, and any other setting the record holds that is neither a
  model's nor one of how it ran; values hashable (lists as tuples).  schedule_steps None
  (the horizon is train_steps) reads as train_steps; a string matcher's one train size is
  kept as recorded (protocol_groups matches it to the list it came from).
  """
  out = dict(DEFAULTS)
  for key in _TOP_LEVEL:
    if run.get(key) is not None and key in out:
      out[key] = run[key]
  settings = run.get("settings") if isinstance(run.get("settings"), dict) else {}
  for key, value in settings.items():
    if key not in MODEL_SETTINGS and key not in _NOT_PROTOCOL:
      out[key] = value
  if out.get("schedule_steps") is None:
    out["schedule_steps"] = out.get("train_steps")
  return {k: _plain(v) for k, v in out.items()}


def _is_string_matcher(run):
  return run.get("algorithm") in clrs30.STRING_MATCHERS


def _matches(run_protocol, algorithm, group_protocol):
  """Whether a string matcher's protocol is `group_protocol` (its train size derived from
  the group's list, clrs30.train_lengths)."""
  for key, value in group_protocol.items():
    if key == "train_lengths":
      if not isinstance(value, tuple) or not value or not all(isinstance(v, int) for v in value):
        return False
      try:
        derived = tuple(clrs30.train_lengths(algorithm, value))
      except ValueError:
        return False
      if derived != run_protocol[key]:
        return False
    elif run_protocol.get(key) != value:
      return False
  return True


@dataclasses.dataclass(frozen=True)
class Group:
  """Runs that share a protocol.

  Attributes:
    protocol: its settings, ((setting, value), ...) sorted by setting.
    runs: the result dicts.
  """
  protocol: tuple  # ((setting, value), ...) sorted by setting
  runs: tuple

  def settings(self):
    """The protocol as {setting: value}."""
    return dict(self.protocol)


def protocol_groups(runs, split_by=None):
  """The protocols of `runs`, as a list of Group (largest first, then by settings).

  A string matcher's run joins the first group whose train-size list gives its one size.

  Args:
    runs: result dicts.
    split_by: None groups by the whole protocol; a list of setting names groups by those
      only (each group may then still hold several protocols: `differing` says which, and
      a Group's protocol holds only those settings).

  Raises:
    ValueError: a split_by name that is not a protocol setting.
  """
  if split_by is not None:
    unknown = [k for k in split_by if k not in PROTOCOL_KEYS]
    if unknown:
      raise ValueError(f"--split-by {','.join(unknown)}: not a protocol setting; valid: "
                       + ", ".join(PROTOCOL_KEYS))
  keys = PROTOCOL_KEYS if split_by is None else tuple(split_by)
  found = {}
  later = []
  for r in runs:
    p = protocol(r)
    if _is_string_matcher(r) and "train_lengths" in keys:
      later.append((r, p))
      continue
    found.setdefault(tuple((k, p[k]) for k in keys), []).append(r)
  for r, p in later:
    home = [key for key in found if _matches(p, r["algorithm"], dict(key))]
    key = home[0] if home else tuple((k, p[k]) for k in keys)
    found.setdefault(key, []).append(r)
  groups = [Group(tuple(sorted(k)), tuple(v)) for k, v in found.items()]
  return sorted(groups, key=lambda g: (-len(g.runs), json.dumps(g.protocol, default=str)))


def differing(groups):
  """The settings whose values differ between `groups` (in PROTOCOL_KEYS order)."""
  settings = [g.settings() for g in groups]
  keys = [k for k in PROTOCOL_KEYS if any(k in s for s in settings)]
  return [k for k in keys if len({json.dumps(s.get(k), default=str) for s in settings}) > 1]


def _value(value):
  if isinstance(value, tuple):
    return "-".join(_value(v) for v in value)
  return str(value)


def group_name(group, keys):
  """A folder name for `group` from the settings `keys`, e.g. 'train_steps=1500'.

  A tuple's values are joined by '-'; no keys give 'all'.
  """
  s = group.settings()
  return ",".join(f"{k}={_value(s[k])}" for k in keys) or "all"


def describe(groups, keys=None):
  """One line: each group by the settings `keys`, with its run count.

  `keys` None: the settings that tell the groups apart (`differing`).
  """
  keys = differing(groups) if keys is None else keys
  return "; ".join(f"{group_name(g, keys)}: {len(g.runs)} run{'s' * (len(g.runs) != 1)}"
                   for g in groups)
