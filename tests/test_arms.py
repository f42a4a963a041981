"""analysis.arms: the arms table pairs each arm with ForgetNet on the same seeds (no jax)."""

import numpy as np

from analysis import arms


def _run(model, seed, score, norm=0.0):
  steps = [0, 50, 100]
  return {"model": model, "algorithm": "insertion_sort", "seed": seed, "test_score": score,
          "penalty_start_step": 50, "lambda_gate": 0.1 if model != "forget" else 0.0,
          "selection": {"first_best": {"test_score": score}, "last_best": {"test_score": score},
                        "final": {"test_score": score - 0.1}},
          "curves": {"val": {"step": steps, "hidden_norm": [norm, norm, norm / 2]},
                     "train": {"step": steps, "output_loss": [1.0] * 3, "hint_loss": [1.0] * 3,
                               "gate_penalty": [2.0] * 3}}}


def test_delta_is_paired_by_seed():
  runs = [_run("forget", 0, 0.70), _run("forget", 1, 0.90), _run("gforget", 0, 0.80, 0.4)]
  per_seed, means = arms.arms_frame(runs)
  g = means[means.model == "gforget"].iloc[0]
  assert np.isclose(g.delta_first_best, 10.0)  # 80 - 70 (seed 0), not 80 - 80 (the mean)
  assert np.isclose(g.delta_final, 10.0)
  assert np.isclose(g.gate_norm, 0.2) and np.isclose(g.gate_norm_switch, 0.4)
  assert np.isclose(g.share, 0.5)
  assert "| 10.0 |" in arms.to_markdown(means, per_seed)
