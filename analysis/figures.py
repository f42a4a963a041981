"""Training-dynamics figures of the paper, from the `curves` of result JSON files.

  <alg>_train_loss      total training loss over steps (curves.train), one line per model
                        label: mean over seeds with a ± std band and each seed as a thin
                        line (paper Fig. 5 left / Fig. 10a), lightly smoothed as there.
  <alg>_val_score       validation score over training (curves.val.score), per model label:
                        mean over seeds with a ± std band (the curve the best checkpoint is
                        chosen on).
  <alg>_hint_step_loss  training hint loss per execution step t at a few checkpoints (early,
                        middle, last logged entry of curves.hint_step_loss; paper Fig. 10b);
                        each panel its own y axis.
  <alg>_hidden_norm     ||h(t-1)||/sqrt(d) on validation (gated: ||g*h||/sqrt(d)) over
                        training (curves.val.hidden_norm; paper Figs. 5 right, 7, 8): the
                        evidence for lambda, e.g. gforget vs gforget_constant vs baseline.
  <alg>_gate            the gated labels only, side by side: the gate term sum ||g|| the
                        penalty acts on (curves.train.gate_term, training) and ||g*h||/sqrt(d)
                        (curves.val.hidden_norm, validation) -- the paper's Figs. 5 and 8.
  ours_vs_paper         (make_tables, from the aggregate) per algorithm with results: our
                        mean ± std next to the paper's mean ± σ, per paper model.
Every model label found gets a line (labels.sort_models order; the lambda calibration runs are
left out by make_tables): a paper model in its colour, a variant of it (gforget_constant) in
the same colour dashed, a multi-task model dotted. One legend per figure, outside the axes
(it never covers a curve). Each figure is written as PNG and PDF with no date or version in
its metadata, so that the same runs give the same bytes. Seeds are put on a common step grid
by linear interpolation (runs that stopped early, e.g. diverged, only cover their own range).
"""

import itertools
import pathlib
import warnings

import matplotlib

matplotlib.use("Agg")  # files only; no display on cluster nodes
import matplotlib.figure  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from analysis import categories  # noqa: E402
from analysis import labels  # noqa: E402

FIGURE_MODELS = None  # None: every model label of the runs
COLORS = {
  "baseline": "tab:blue",
  "forget": "tab:orange",
  "gforget": "tab:green",
  "gforget_nopenalty": "tab:purple",
}
_OTHER_COLORS = ("tab:red", "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan")


def styles(models):
  """The colour and line style of each model label, in labels.sort_models order.

  The family's colour (labels.split_label); '-' for the paper's label, '--' for a variant,
  ':' multi-task, '-.' a multi-task variant.  Labels of no known family, and labels whose
  colour and style a label before them has already taken (a second variant of a family),
  get the colours left over, in turn.

  Returns:
    {label: (colour, linestyle)}.
  """
  spare = itertools.cycle(_OTHER_COLORS)
  out, used = {}, set()
  for label in labels.sort_models(models):
    family, variant, multitask = labels.split_label(label)
    style = {(False, False): "-", (True, False): "--", (False, True): ":", (True, True): "-."}[
      (bool(variant), multitask)
    ]
    color = COLORS.get(family)
    if color is None or (color, style) in used:
      color = next(spare)
    used.add((color, style))
    out[label] = (color, style)
  return out


def display(label):
  """A model label as a legend names it (labels.model_label, ', multi-task' added)."""
  return labels.model_label(label) + (", multi-task" if labels.split_label(label)[2] else "")


CHECKPOINT_FRACTIONS = (0.1, 0.5, 1.0)


def smooth(y, window):
  """Centred moving average of `y` over `window` points, ignoring NaN.

  The paper smooths its loss curves 'for clarity'.  `y` is returned as it is (as floats)
  for a window of 1 or less, or fewer than 3 points; a window of only NaN gives NaN.
  """
  y = np.asarray(y, dtype=float)
  if window <= 1 or len(y) < 3:
    return y
  half = window // 2
  out = np.empty_like(y)
  for i in range(len(y)):
    chunk = y[max(0, i - half) : i + half + 1]
    out[i] = np.nanmean(chunk) if np.isfinite(chunk).any() else np.nan
  return out


def _series(run, group, key):
  """(steps, values) of curves[group][key] as float arrays, or None if absent/malformed."""
  try:
    curve = run["curves"][group]
    steps = np.asarray(curve["step"], dtype=float)
    values = np.asarray([np.nan if v is None else v for v in curve[key]], dtype=float)
  except (KeyError, TypeError, ValueError):
    return None
  if steps.ndim != 1 or steps.shape != values.shape or len(steps) == 0:
    return None
  return steps, values


def band(series_list):
  """Mean and std over seeds on a common grid.

  Args:
    series_list: (steps, values) of each seed.

  Returns:
    (grid, mean, std): the grid is the longest seed's steps; each seed is interpolated
    linearly on it, within its own range of finite values only; std is 0 for one seed
    and where no seed has a value (the mean is NaN there).
  """
  grid = max((s for s, _ in series_list), key=len)
  stacked = []
  for steps, values in series_list:
    ok = np.isfinite(values)
    y = np.full(len(grid), np.nan)
    if ok.sum() >= 1:
      inside = (grid >= steps[ok].min()) & (grid <= steps[ok].max())
      y[inside] = np.interp(grid[inside], steps[ok], values[ok])
    stacked.append(y)
  stacked = np.array(stacked)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
    mean = np.nanmean(stacked, axis=0)
    std = np.nanstd(stacked, axis=0, ddof=0) if len(stacked) > 1 else np.zeros(len(grid))
  return grid, mean, np.nan_to_num(std)


def _runs_by_model(runs, algorithm, models=None):
  """{label: runs of `algorithm`} in labels.sort_models order; models=None: all labels."""
  by_model = {}
  for r in runs:
    if r["algorithm"] == algorithm and (models is None or r["model"] in models):
      by_model.setdefault(r["model"], []).append(r)
  return {m: by_model[m] for m in labels.sort_models(by_model)}


def _seeds(n):
  return f"{n} seed" + ("" if n == 1 else "s")


def _curve_plot(ax, by_model, group, key, *, smooth_frac=0.0, log=False):
  plotted = False
  style = styles(by_model)
  for model, runs in by_model.items():
    series = [s for s in (_series(r, group, key) for r in runs) if s is not None]
    if not series:
      continue
    color, linestyle = style[model]
    grid, mean, std = band(series)
    window = max(1, int(round(smooth_frac * len(grid))))
    mean, std = smooth(mean, window), smooth(std, window)
    if len(series) > 1:
      for steps, values in series:  # each seed, thin: a band can hide one odd seed
        w = max(1, int(round(smooth_frac * len(steps))))
        ax.plot(steps, smooth(values, w), color=color, linestyle=linestyle, alpha=0.3, lw=0.6)
    label = f"{display(model)} ({_seeds(len(series))})"
    ax.plot(grid, mean, color=color, linestyle=linestyle, label=label)
    ax.fill_between(grid, mean - std, mean + std, color=color, alpha=0.15, linewidth=0)
    plotted = True
  if plotted and log:
    ax.set_yscale("log")
  return plotted


def _hint_step_entries(run):
  """(steps, [loss per execution step]) of curves.hint_step_loss, or None."""
  try:
    h = run["curves"]["hint_step_loss"]
    steps = [float(s) for s in h["step"]]
    losses = [[np.nan if v is None else float(v) for v in entry] for entry in h["loss"]]
  except (KeyError, TypeError, ValueError):
    return None
  if not steps or len(steps) != len(losses):
    return None
  return steps, losses


def labelled_path(flag):
  """An argparse `type` for a command-line value LABEL=PATH (the figure CLIs' --run, --eval).

  Args:
    flag: the flag, named in the error.

  Returns:
    A function of the value's text to (label, path); it raises ArgumentTypeError where
    either is missing.
  """
  import argparse

  def parse(text):
    label, sep, path = text.partition("=")
    if not sep or not label or not path:
      raise argparse.ArgumentTypeError(f"{flag} wants LABEL=PATH, got {text!r}")
    return label, path
  return parse


# No creation date (PDF) and no writer version (PNG, PDF): regenerated figures are byte-equal.
METADATA = {"png": {"Software": None}, "pdf": {"CreationDate": None, "Producer": None,
                                               "Creator": None}}


def savefig(fig, path):
  """Write `fig` to `path` (.png or .pdf) with no date or version in it; returns the path."""
  path = pathlib.Path(path)
  ext = path.suffix.lstrip(".")
  fig.savefig(path, dpi=150, bbox_inches="tight", metadata=METADATA[ext])
  return path


def save_figure(fig, out_dir, name):
  """Writes `fig` as `<out_dir>/<name>.png` and `.pdf` (`savefig`) and closes it; the paths."""
  paths = [savefig(fig, pathlib.Path(out_dir) / f"{name}.{ext}") for ext in ("png", "pdf")]
  plt.close(fig)
  return paths


def outside_legend(where, handles=None, labels_=None):
  """Draws one legend right of the axes, each label once, in the order first drawn.

  Args:
    where: an Axes, or a Figure for several panels.
    handles, labels_: the entries; None: those of `where`.  No legend without entries.
  """
  if handles is None:
    handles, labels_ = where.get_legend_handles_labels()
  seen = {}
  for h, lab in zip(handles, labels_):
    seen.setdefault(lab, h)
  if not seen:
    return
  kwargs = dict(fontsize=7, frameon=False, loc="upper left")
  if isinstance(where, matplotlib.figure.Figure):
    where.legend(list(seen.values()), list(seen), bbox_to_anchor=(1.0, 0.95), **kwargs)
  else:
    where.legend(list(seen.values()), list(seen), bbox_to_anchor=(1.02, 1.0), **kwargs)


def plot_train_loss(runs, algorithm, out_dir, models=FIGURE_MODELS):
  """`<algorithm>_train_loss` of the module docstring (log scale); [] without curves.

  Args:
    runs: results with curves.
    algorithm: the algorithm drawn.
    out_dir: where the figure goes.
    models: the labels to draw; None: every label of `runs`.

  Returns:
    The paths written (PNG and PDF), or [].
  """
  by_model = _runs_by_model(runs, algorithm, models)
  fig, ax = plt.subplots(figsize=(5, 3.5))
  if not _curve_plot(ax, by_model, "train", "loss", smooth_frac=0.04, log=True):
    plt.close(fig)
    return []
  ax.set(
    xlabel="training step",
    ylabel="training loss",
    title=f"{categories.plain_name(algorithm)}: training loss",
  )
  outside_legend(ax)
  ax.grid(alpha=0.3)
  return save_figure(fig, out_dir, f"{algorithm}_train_loss")


def plot_hidden_norm(runs, algorithm, out_dir, models=FIGURE_MODELS):
  """`<algorithm>_hidden_norm` of the module docstring; arguments and return as plot_train_loss."""
  by_model = _runs_by_model(runs, algorithm, models)
  fig, ax = plt.subplots(figsize=(5, 3.5))
  if not _curve_plot(ax, by_model, "val", "hidden_norm"):
    plt.close(fig)
    return []
  ax.set(
    xlabel="training step",
    ylabel=r"$\|h^{(t-1)}\|/\sqrt{d}$ (gated: $\|g\odot h\|$)",
    title=f"{categories.plain_name(algorithm)}: history norm (validation)",
  )
  ax.set_ylim(bottom=-0.03 * ax.get_ylim()[1])  # keep an all-zero ForgetNet line visible
  outside_legend(ax)
  ax.grid(alpha=0.3)
  return save_figure(fig, out_dir, f"{algorithm}_hidden_norm")


def plot_hint_step_loss(runs, algorithm, out_dir, models=FIGURE_MODELS):
  """`<algorithm>_hint_step_loss`: loss per execution step at a few logged training steps.

  The steps are at CHECKPOINT_FRACTIONS of the longest run's log; a run contributes to a
  panel only if it logged that exact step (runs log on a fixed schedule; one that stopped
  early, e.g. diverged, drops out of late panels).  Arguments and return as
  `plot_train_loss`.
  """
  by_model = _runs_by_model(runs, algorithm, models)
  entries = {
    m: [e for e in (_hint_step_entries(r) for r in rs) if e is not None]
    for m, rs in by_model.items()
  }
  entries = {m: e for m, e in entries.items() if e}
  if not entries:
    return []
  longest = max((steps for es in entries.values() for steps, _ in es), key=len)
  checkpoints = sorted({longest[int(round(f * (len(longest) - 1)))] for f in CHECKPOINT_FRACTIONS})
  n = len(checkpoints)
  # Each panel its own y axis: the loss falls by orders of magnitude over training, and a
  # shared axis flattens the late panels.
  fig, axes = plt.subplots(1, n, figsize=(4 * n, 3.2), sharey=False, squeeze=False)
  n_seeds = {m: len(e) for m, e in entries.items()}
  style = styles(entries)
  for ax, step in zip(axes[0], checkpoints):
    for model, model_entries in entries.items():
      curves = [losses[steps.index(step)] for steps, losses in model_entries if step in steps]
      if not curves:
        continue
      width = max(len(c) for c in curves)
      stacked = np.array([c + [np.nan] * (width - len(c)) for c in curves])
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(stacked, axis=0)
        std = np.nanstd(stacked, axis=0) if len(stacked) > 1 else np.zeros(width)
      t = np.arange(1, width + 1)
      ax.plot(
        t,
        mean,
        marker="o",
        markersize=3,
        color=style[model][0],
        linestyle=style[model][1],
        label=f"{display(model)} ({_seeds(n_seeds[model])})",
      )
      ax.fill_between(
        t,
        mean - np.nan_to_num(std),
        mean + np.nan_to_num(std),
        color=style[model][0],
        alpha=0.2,
        linewidth=0,
      )
    ax.set(xlabel="execution step $t$", title=f"training step {step:.0f}")
    ax.grid(alpha=0.3)
  handles, names = [], []
  for ax in axes[0]:
    h, lab = ax.get_legend_handles_labels()
    handles += h
    names += lab
  outside_legend(fig, handles, names)
  axes[0][0].set_ylabel("hint loss at step $t$")
  fig.suptitle(f"{categories.plain_name(algorithm)}: training hint loss per execution step", y=1.02)
  return save_figure(fig, out_dir, f"{algorithm}_hint_step_loss")


def plot_val_score(runs, algorithm, out_dir, models=FIGURE_MODELS):
  """`<algorithm>_val_score`: validation score over training per label, mean ± std over seeds.

  Arguments and return as `plot_train_loss`.
  """
  by_model = _runs_by_model(runs, algorithm, models)
  fig, ax = plt.subplots(figsize=(5, 3.5))
  if not _curve_plot(ax, by_model, "val", "score"):
    plt.close(fig)
    return []
  ax.set(xlabel="training step", ylabel="validation score (micro-F1)",
         title=f"{categories.plain_name(algorithm)}: validation score")
  outside_legend(ax)
  ax.grid(alpha=0.3)
  return save_figure(fig, out_dir, f"{algorithm}_val_score")


def plot_gate(runs, algorithm, out_dir, models=FIGURE_MODELS):
  """`<algorithm>_gate`: the gated labels' gate term beside their history norm.

  The gate term sum ||g|| (training, what the penalty acts on) beside ||g*h||/sqrt(d)
  (validation), over training; only labels with a run whose history is 'gated'.
  Arguments and return as `plot_train_loss`; [] without a gated run.
  """
  by_model = {m: rs for m, rs in _runs_by_model(runs, algorithm, models).items()
              if any(r.get("history") == "gated" for r in rs)}
  if not by_model:
    return []
  fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
  drawn = _curve_plot(left, by_model, "train", "gate_term", smooth_frac=0.02, log=True)
  drawn = _curve_plot(right, by_model, "val", "hidden_norm") or drawn
  if not drawn:
    plt.close(fig)
    return []
  left.set(xlabel="training step", ylabel=r"gate term $\sum\|g\|$ (training)",
           title=r"$\|g\|$: what the penalty acts on")
  right.set(xlabel="training step", ylabel=r"$\|g\odot h^{(t-1)}\|/\sqrt{d}$ (validation)",
            title=r"$\|g\odot h\|$: the history that gets through")
  right.set_ylim(bottom=0)
  for ax in (left, right):
    ax.grid(alpha=0.3)
  h1, l1 = left.get_legend_handles_labels()
  h2, l2 = right.get_legend_handles_labels()
  outside_legend(fig, h1 + h2, l1 + l2)
  fig.suptitle(f"{categories.plain_name(algorithm)}: the gate over training", y=1.02)
  return save_figure(fig, out_dir, f"{algorithm}_gate")


OURS_VS_PAPER_MODELS = ("baseline", "forget", "gforget", "gforget_nopenalty")


def plot_ours_vs_paper(agg, paper, out_dir, name="ours_vs_paper"):
  """Ours beside the paper's, per algorithm with results and per paper model.

  For each of OURS_VS_PAPER_MODELS present in `agg`: our mean ± std over seeds (filled)
  beside the paper's mean ± σ (hollow).

  Args:
    agg: results.aggregate().
    paper: paper.load_paper_results().
    out_dir: where the figure goes (made where missing).
    name: the file name, without extension.

  Returns:
    The paths written (PNG and PDF), or [] without such results.
  """
  from analysis import paper as paper_lib

  models = [m for m in OURS_VS_PAPER_MODELS if (agg["model"] == m).any()]
  algorithms = [a for a in categories.PAPER_ORDER
                if ((agg["algorithm"] == a) & agg["model"].isin(models)).any()]
  if not algorithms:
    return []
  fig, ax = plt.subplots(figsize=(max(4.0, 1.3 * len(algorithms) + 1.5), 3.6))
  width = 0.8 / len(models)
  style = styles(models)
  for i, m in enumerate(models):
    ours = {r.algorithm: r for r in agg[agg["model"] == m].itertuples()}
    theirs = paper_lib.paper_cells(paper, m)
    for j, a in enumerate(algorithms):
      x = j - 0.4 + width * (i + 0.5)
      if a in ours and np.isfinite(ours[a].mean_pct):
        r = ours[a]
        ax.errorbar(x - width * 0.18, r.mean_pct, yerr=np.nan_to_num(r.std_pct), fmt="o",
                    color=style[m][0], ms=4, capsize=2, label=f"{display(m)}: ours")
      if a in theirs:
        mean, sd = theirs[a]
        ax.errorbar(x + width * 0.18, mean, yerr=sd, fmt="s", mfc="white",
                    color=style[m][0], ms=4, capsize=2, label=f"{display(m)}: paper")
  ax.set_xticks(range(len(algorithms)))
  ax.set_xticklabels([categories.plain_name(a) for a in algorithms], rotation=20, ha="right",
                     fontsize=8)
  ax.set(ylabel="OOD test micro-F1 (%)",
         title="ours (mean ± std over seeds) against the paper (mean ± σ, 10 seeds)")
  ax.grid(alpha=0.3, axis="y")
  outside_legend(ax)
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  return save_figure(fig, out_dir, name)


def make_figures(runs, algorithms, out_dir, models=FIGURE_MODELS):
  """The per-algorithm figures of the module docstring for each of `algorithms`.

  An algorithm without curves for any model gets no figure and a note on stdout.

  Args:
    runs: results with curves.
    algorithms: the algorithms to draw.
    out_dir: where the figures go (made where missing).
    models: the labels to draw; None: every label in `runs`.

  Returns:
    The paths written.
  """
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  written = []
  for algorithm in algorithms:
    paths = (
      plot_train_loss(runs, algorithm, out_dir, models)
      + plot_val_score(runs, algorithm, out_dir, models)
      + plot_hint_step_loss(runs, algorithm, out_dir, models)
      + plot_hidden_norm(runs, algorithm, out_dir, models)
      + plot_gate(runs, algorithm, out_dir, models)
    )
    if not paths:
      print(f"figures: no curves for {algorithm}; skipped")
    written += paths
  return written


__all__ = ["make_figures", "plot_ours_vs_paper", "band", "smooth", "styles", "savefig"]
