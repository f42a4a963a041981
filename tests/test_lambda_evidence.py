"""analysis/lambda_evidence.py: the λ readings' report and gate-norm figures from a results tree."""

import json

from analysis import lambda_evidence


def _result(path, score, norms):
  path.mkdir(parents=True)
  (path / "result.json").write_text(json.dumps({
      "seed": int(path.name[len("seed"):]) if path.name.startswith("seed") else 0,
      "test_score": score, "curves": {"val": {"step": [0, 50, 100], "hidden_norm": norms}}}))


def test_report_and_figure(tmp_path):
  trial_dir = tmp_path / "_calibration" / "runs" / "constant" / "bfs" / "seed0" / "trial0"
  _result(trial_dir, 0.5, [0.5, 0.01, 0.001])
  cal = tmp_path / "_calibration"
  (cal / "schedule").mkdir(parents=True)
  (cal / "constant").mkdir(parents=True)
  (cal / "schedule" / "bfs.json").write_text(json.dumps({
      "reading": "schedule", "algorithm": "bfs", "lambda": 0.25, "share": 0.5,
      "calibration_step": 60, "status": "done", "seeds": [{"seed": 0}]}))
  (cal / "constant" / "bfs.json").write_text(json.dumps({
      "reading": "constant", "algorithm": "bfs", "lambda": 2.5, "share": 0.45,
      "calibration_step": 60, "status": "done", "seeds": [{"seed": 0, "trials": [
          {"trial": 0, "lambda": 0.25, "L": 1.0, "G": 4.0, "P": 0.01, "share": 0.0099,
           "gate_norm": 0.001, "run_dir": str(trial_dir)},
          {"trial": 1, "lambda": 2.5, "L": 1.0, "G": 0.33, "P": 0.82, "share": 0.45,
           "gate_norm": 0.02, "run_dir": str(trial_dir)}]}]}))
  _result(tmp_path / "baseline" / "bfs" / "seed0", 0.9, [1.0, 1.0, 1.0])
  _result(tmp_path / "gforget" / "bfs" / "seed0", 0.95, [0.5, 0.4, 0.01])
  out = tmp_path / "evidence"
  assert lambda_evidence.main(["--results", str(tmp_path), "--out", str(out)]) == 0
  text = (out / "lambda_evidence.md").read_text()
  assert "| bfs | schedule | 0.25 | 0.500 | 60 | done | 95.00 |" in text
  assert "| bfs | constant | 2.5 | 0.450 | 60 | done | — |" in text
  assert "| bfs | 0 | 1 | 2.5 | 1 | 0.33 | 0.82 | 0.450 | 0.02 |" in text
  assert "| bfs | 90.00 | 95.00 | — |" in text
  assert (out / "bfs_gate_norm.png").stat().st_size > 1000
  assert lambda_evidence.main(["--results", str(tmp_path / "nope"), "--out", str(out)]) == 2


def test_seed_zero_column_and_seed_order(tmp_path):
  """The 'test (seed 0)' column is seed 0's run, not the first folder in string order, and
  the scores list seeds numerically (seed 2 before seed 10)."""
  for seed, score in ((10, 0.1), (2, 0.2)):
    _result(tmp_path / "gforget" / "bfs" / f"seed{seed}", score, [0.5, 0.4, 0.01])
  text = lambda_evidence.report(tmp_path)
  assert "| bfs | schedule | — | — | — | — | — |" in text  # no seed 0: no score
  assert "| bfs | — | 20.00, 10.00 | — |" in text
  _result(tmp_path / "gforget" / "bfs" / "seed0", 0.3, [0.5, 0.4, 0.01])
  text = lambda_evidence.report(tmp_path)
  assert "| bfs | schedule | — | — | — | — | 30.00 |" in text
  assert "| bfs | — | 30.00, 20.00, 10.00 | — |" in text
