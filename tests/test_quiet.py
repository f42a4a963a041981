"""Entry points start without TensorFlow/absl banners; -v brings them back; real
warnings written to stderr still show (nar_markov/quiet.py)."""

import os
import pathlib
import subprocess
import sys

import pytest

from nar_markov import quiet

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
NOISE = ["oneDNN custom operations", "Could not find cuda drivers",
         "absl::InitializeLog", "Sampling dataset on-the-fly"]
ANALYSIS_RESULTS = REPO_ROOT / "tests" / "fixtures" / "analysis" / "results"


def _run(args, tmp_path):
  env = {k: v for k, v in os.environ.items()
         if k not in ("TF_CPP_MIN_LOG_LEVEL", quiet.ENV_VERBOSE)}
  env["NAR_MARKOV_CACHE"] = str(tmp_path / "cache")
  return subprocess.run([sys.executable] + args, cwd=REPO_ROOT, env=env,
                        capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("args", [
    ["launch/sweep.py", "--gin", "gin/baseline.gin", "--gin", "gin/smoke.gin",
     "--dry-run", "--cluster", "local", "--results", "{tmp}/results"],
    ["launch/sweep.py", "--status", "--results", str(ANALYSIS_RESULTS)],
    ["-m", "nar_markov.data.pipeline", "--algorithm", "bfs", "--split", "train"],
    ["-m", "nar_markov.training.calibrate", "--help"],
    ["-m", "nar_markov.probes.evaluate", "{tmp}/no_such_run"],
    ["-m", "nar_markov.tools.replay", "--help"],
    ["benchmarks/bench.py", "--algorithms", "no_such_algorithm"],
    ["benchmarks/bench_seeds.py", "--algorithm", "no_such_algorithm"],
    ["analysis/make_tables.py", "--results", str(ANALYSIS_RESULTS),
     "--out", "{tmp}/tables"],
], ids=["sweep-dry-run", "sweep-status", "data", "calibrate", "evaluate", "replay", "bench",
        "bench_seeds", "make_tables"])
def test_entry_points_print_no_start_up_banners(args, tmp_path):
  args = [a.format(tmp=tmp_path) for a in args]
  proc = _run(args, tmp_path)
  out = proc.stdout + proc.stderr
  assert "Traceback" not in out, out
  refused = any("no_such" in a for a in args)  # a one-line error, exit 2
  assert proc.returncode == (2 if refused else 0), out
  assert out.strip(), "the command printed nothing at all"
  for noise in NOISE:
    assert noise not in out, out


def test_verbose_flag_shows_library_messages(tmp_path):
  proc = _run(["-m", "nar_markov.data.pipeline", "--algorithm", "bfs", "--split", "train", "-v"],
              tmp_path)
  assert proc.returncode == 0, proc.stderr
  # dm-clrs's absl warning, dropped without -v (test above).
  assert "Sampling dataset on-the-fly" in proc.stderr


def test_filtered_stderr_drops_banners_and_keeps_everything_else(capfd):
  with quiet.filtered_stderr():
    os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called "
                b"are written to STDERR\n")
    os.write(2, b"I0000 00:00:1795368444.271320    3710 port.cc:153] oneDNN custom "
                b"operations are on.\n")
    os.write(2, b"2025-09-17 14:44:05.157831: I external/local_xla/xla/tsl/cuda/"
                b"cudart_stub.cc:32] Could not find cuda drivers on your machine\n")
    os.write(2, b"E0000 00:00:1795368444.3 3710 cuda_dnn.cc:8579] Unable to register "
                b"cuDNN factory: Attempting to register factory for plugin cuDNN\n")
    os.write(2, b"W0000 00:00:1795368444.3 3710 some.cc:1] a real warning\n")
    print("UserWarning: from python", file=sys.stderr)
  # (pytest's sys.stderr is not fd 2, so the order between the two may differ here)
  assert sorted(capfd.readouterr().err.splitlines()) == [
      "UserWarning: from python", "W0000 00:00:1795368444.3 3710 some.cc:1] a real warning"]


@pytest.mark.parametrize("argv, verbose", [
    ([], False), (["--gin", "x.gin"], False), (["-v"], True), (["--verbose"], True),
    (["--dry-run", "-vv"], True), (["--gin_param", "x=-1"], False)])
def test_wants_verbose(argv, verbose, monkeypatch):
  monkeypatch.delenv(quiet.ENV_VERBOSE, raising=False)
  assert quiet.wants_verbose(argv) is verbose
  monkeypatch.setenv(quiet.ENV_VERBOSE, "1")
  assert quiet.wants_verbose(argv) is True
