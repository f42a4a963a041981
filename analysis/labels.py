"""Model labels of the results tree -> the paper's models, display names and column order.

A result's `model` is its folder name, `results/<model>/<algorithm>/seed<k>/`. The paper's
labels are baseline, forget, gforget, gforget_nopenalty and <model>_multitask; other labels are
variants of one of them, named `<paper label>_<variant>` (e.g. `gforget_constant`: G-ForgetNet
with the 'constant' reading of the lambda heuristic). A variant gets its own column and is
compared with the paper's numbers of the model it varies (`paper_model`). The lambda
calibration runs (model `calibrate`, under results/calibrate/ or results/_calibration/) are
measurements for lambda, not results: `is_calibration` keeps them out of tables and figures.
"""

import pathlib

from analysis import paper

# The paper's models (and the literature baselines of its Table 2/6), in table order.
MODEL_LABELS = {
  "baseline": "Baseline",
  "forget": "ForgetNet",
  "gforget": "G-ForgetNet",
  "gforget_nopenalty": "G-ForgetNet w/o penalty",
  "calibrate": "G-ForgetNet (calibrate)",
  "baseline_multitask": "Baseline",
  "forget_multitask": "ForgetNet",
  "memnet": "Memnet",
  "mpnn": "MPNN",
  "pgn": "PGN",
  "triplet_gmpnn": "Triplet-GMPNN",
}
# Longest first: gforget_nopenalty_x is a variant of gforget_nopenalty, not of gforget.
FAMILIES = ("gforget_nopenalty", "gforget", "forget", "baseline")
MULTITASK_SUFFIX = "_multitask"
FORGETNET = "forget"  # the label G-ForgetNet arms are compared with (arms, verdict)
CALIBRATION_MODEL = "calibrate"
CALIBRATION_DIRS = ("calibrate", "_calibration")


def split_label(label):
  """(family, variant, multitask) of a model label.

  gforget_constant -> ('gforget', 'constant', False); baseline_multitask -> ('baseline',
  '', True); a label of no family in FAMILIES -> (None, '', multitask).
  """
  multitask = label.endswith(MULTITASK_SUFFIX)
  base = label[: -len(MULTITASK_SUFFIX)] if multitask else label
  for family in FAMILIES:
    if base == family:
      return family, "", multitask
    if base.startswith(family + "_"):
      return family, base[len(family) + 1 :], multitask
  return None, "", multitask


def paper_model(label):
  """The paper's model that results labelled `label` are compared with, or None.

  A paper label is itself; `<paper label>_<variant>` is its paper label (gforget_constant ->
  gforget, gforget_nopenalty_x -> gforget_nopenalty, forget_x_multitask -> forget_multitask);
  the calibration runs and labels of no known family have no counterpart.
  """
  if label == CALIBRATION_MODEL:
    return None
  family, _, multitask = split_label(label)
  if family is None:
    return label if label in paper.PAPER_TABLE else None
  name = family + (MULTITASK_SUFFIX if multitask else "")
  return name if name in paper.PAPER_TABLE else None


def model_label(label):
  """The plain-text column name of a model label.

  MODEL_LABELS' name for a label there, or for a family's label with `_multitask`
  (gforget_multitask -> 'G-ForgetNet'); the family's name and the variant for a variant
  (gforget_constant -> 'G-ForgetNet (constant)'); the label itself otherwise (not
  escaped: escape it for LaTeX).
  """
  if label in MODEL_LABELS:
    return MODEL_LABELS[label]
  family, variant, _ = split_label(label)
  if family is None:
    return label
  if not variant:
    return MODEL_LABELS[family]  # e.g. gforget_multitask (a multi-task table's column)
  return MODEL_LABELS[family] + " (" + variant.replace("_", " ") + ")"


def model_sort_key(label):
  """The sort key of a model label (`sort_models`).

  The paper's labels in MODEL_LABELS order, each followed by its variants
  (alphabetically); labels of no family last.
  """
  order = list(MODEL_LABELS)
  family, variant, multitask = split_label(label)
  anchor = paper_model(label) or (
    family + (MULTITASK_SUFFIX if multitask else "") if family else None
  )
  rank = order.index(anchor) if anchor in order else len(order)
  return (rank, variant, label)


def sort_models(labels):
  """The distinct `labels`, sorted by `model_sort_key`."""
  return sorted(set(labels), key=model_sort_key)


def is_calibration(run):
  """Whether `run` is a lambda calibration run, not a result.

  It is where its model is `calibrate`, or its file (run['path'], relative to the results
  tree) is under a top-level calibrate/ or _calibration/ folder or any _calibration/ one.
  """
  if run.get("model") == CALIBRATION_MODEL:
    return True
  parts = pathlib.PurePosixPath(run.get("path", "")).parts[:-1]
  return bool(parts) and (parts[0] in CALIBRATION_DIRS or "_calibration" in parts)


__all__ = [
  "MODEL_LABELS",
  "split_label",
  "paper_model",
  "model_label",
  "model_sort_key",
  "sort_models",
  "is_calibration",
]
