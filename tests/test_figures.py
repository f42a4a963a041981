"""analysis.figures: what each figure draws, readable axes and legends, and the same bytes
from the same runs."""

import json
import warnings

import numpy as np
import pytest

from analysis import figures
from analysis import lambda_evidence
from analysis import make_tables
from analysis import paper as paper_lib
from analysis import results as results_lib

from tests.test_analysis import RESULTS


@pytest.fixture(scope="module")
def runs():
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", results_lib.ResultWarning)
    found, _ = results_lib.load_runs(RESULTS)
  return found


@pytest.fixture
def captured(monkeypatch):
  """The figures drawn, by name, instead of files."""
  drawn = {}

  def keep(fig, out_dir, name):
    drawn[name] = fig
    return [name]
  monkeypatch.setattr(figures, "save_figure", keep)
  yield drawn
  for fig in drawn.values():
    figures.plt.close(fig)


def test_two_regenerations_are_byte_identical(tmp_path):
  """Was: matplotlib's CreationDate rewrote every PDF on each regeneration."""
  for name in ("a", "b"):
    make_tables.make_all(RESULTS, tmp_path / name, paper=True, figures=["floyd_warshall"],
                         log=lambda m: None)
  files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*")
                 if p.is_file())
  assert len([f for f in files if f.suffix in (".png", ".pdf")]) == 12
  for f in files:
    assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
  pdf = (tmp_path / "a" / "figures" / "ours_vs_paper.pdf").read_bytes()
  assert b"CreationDate" not in pdf and b"matplotlib" not in pdf.lower()
  assert b"matplotlib" not in (tmp_path / "a" / "figures" / "ours_vs_paper.png").read_bytes()


def _legend_labels(fig):
  legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
  assert len(legends) == 1, "one legend per figure"
  return [t.get_text() for t in legends[0].get_texts()]


def test_hint_step_loss_panels_have_their_own_y_axis_and_one_legend(runs, captured, tmp_path):
  figures.plot_hint_step_loss(runs, "insertion_sort", tmp_path)
  fig = captured["insertion_sort_hint_step_loss"]
  axes = fig.axes
  assert len(axes) == 3
  assert not any(axes[0].get_shared_y_axes().joined(axes[0], ax) for ax in axes[1:])
  labels = _legend_labels(fig)
  assert len(labels) == len(set(labels)) == 6  # the six labels of insertion_sort, once each
  assert "G-ForgetNet (3 seeds)" in labels


def test_curve_figures_put_one_legend_outside_the_axes(runs, captured, tmp_path):
  figures.plot_train_loss(runs, "floyd_warshall", tmp_path)
  figures.plot_hidden_norm(runs, "floyd_warshall", tmp_path)
  for name in ("floyd_warshall_train_loss", "floyd_warshall_hidden_norm"):
    fig = captured[name]
    (ax,) = fig.axes
    legend = ax.get_legend()
    fig.canvas.draw()
    box, frame = legend.get_window_extent(), ax.get_window_extent()
    assert box.x0 >= frame.x1, f"{name}: the legend overlaps the axes"
    labels = _legend_labels(fig)
    assert len(labels) == len(set(labels))


def test_validation_curves_are_the_mean_over_seeds(runs, captured, tmp_path):
  figures.plot_val_score(runs, "insertion_sort", tmp_path)
  (ax,) = captured["insertion_sort_val_score"].axes
  mean = next(line for line in ax.get_lines() if line.get_label() == "Baseline (3 seeds)")
  seeds = [r for r in runs if r["model"] == "baseline" and r["algorithm"] == "insertion_sort"]
  expected = np.mean([r["curves"]["val"]["score"] for r in seeds], axis=0)
  assert np.allclose(mean.get_ydata(), expected)
  assert len(ax.collections) == 6  # a band per model label


def test_gate_figure_shows_the_gate_term_beside_the_gated_history(runs, captured, tmp_path):
  figures.plot_gate(runs, "insertion_sort", tmp_path)
  left, right = captured["insertion_sort_gate"].axes
  assert left.get_yscale() == "log"
  labels = _legend_labels(captured["insertion_sort_gate"])
  assert labels == ["G-ForgetNet (3 seeds)", "G-ForgetNet w/o penalty (3 seeds)"]
  g = [r for r in runs if r["model"] == "gforget" and r["algorithm"] == "insertion_sort"]
  norm = next(line for line in right.get_lines() if line.get_label() == labels[0])
  assert np.allclose(norm.get_ydata(), np.mean([r["curves"]["val"]["hidden_norm"] for r in g],
                                               axis=0))
  assert figures.plot_gate([r for r in runs if r["model"] == "baseline"], "insertion_sort",
                           tmp_path) == []


def test_ours_vs_paper_draws_the_papers_sigma(runs, captured, tmp_path):
  agg = results_lib.aggregate(results_lib.to_long(runs))
  figures.plot_ours_vs_paper(agg, paper_lib.load_paper_results(), tmp_path)
  (ax,) = captured["ours_vs_paper"].axes
  bars = {}
  for c in ax.containers:
    x, y = c.lines[0].get_data()
    (segments,) = [col.get_segments() for col in c.lines[2]]
    bars.setdefault(c.get_label(), []).append((float(y[0]), float(segments[0][1][1] - y[0])))
  # insertion_sort: the paper's G-ForgetNet 98.40 ± 0.21; ours 99.00 ± 0.50.
  assert (98.40, pytest.approx(0.21)) in bars["G-ForgetNet: paper"]
  assert (pytest.approx(99.0), pytest.approx(0.5)) in bars["G-ForgetNet: ours"]
  assert [t.get_text() for t in ax.get_xticklabels()] == [
    "BFS", "Floyd-Warshall", "Insertion Sort"]


def test_lambda_evidence_legend_has_one_entry_per_model(tmp_path, monkeypatch):
  """Was: one legend entry per seed, all with the same label."""
  for seed in range(2):
    path = tmp_path / "baseline" / "bfs" / f"seed{seed}"
    path.mkdir(parents=True)
    (path / "result.json").write_text(json.dumps(
        {"test_score": 0.9, "curves": {"val": {"step": [0, 50], "hidden_norm": [1.0, 0.9]}}}))
  seen = []
  monkeypatch.setattr(figures, "savefig", lambda fig, path: seen.append(fig) or path)
  lambda_evidence.plot(tmp_path, "bfs", tmp_path)
  assert _legend_labels(seen[0]) == ["baseline (2 seeds)"]
  figures.plt.close(seen[0])
