"""CI runs exactly the README's test command (.ci/run); that command ends, failed,
when a test process dies."""

import pathlib
import re
import shlex
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
  command = _readme_test_command()
  ci = (REPO_ROOT / ".ci" / "run").read_text().rstrip().splitlines()
  assert ci[-1] == command
  assert "python -m pytest" in command


def _readme_test_command() -> str:
  readme = (REPO_ROOT / "README.md").read_text()
  section = readme.split("**2. Run the tests:**", 1)[1]
  return re.search(r"```bash\n(.+?)\n```", section, re.S).group(1).strip()


def test_a_crashing_test_process_fails_the_readme_command_instead_of_hanging(tmp_path):
  """Under `--dist loadfile` a dead worker can leave pytest-xdist waiting forever
  with idle workers (it did in CI); the README's flags must end such a run, failed."""
  (tmp_path / "test_a.py").write_text(
      "import time\n"
      "def test_a1(): time.sleep(1)\n"
      "def test_a2(): time.sleep(1)\n")
  (tmp_path / "test_b.py").write_text(
      "import os, signal, time\n"
      "def test_b1(): time.sleep(0.5)\n"
      "def test_b2(): os.kill(os.getpid(), signal.SIGSEGV)\n"
      "def test_b3(): pass\n")
  for name in ("c", "d", "e"):
    (tmp_path / f"test_{name}.py").write_text(
        "import time\ndef test_1(): time.sleep(2)\n")
  args = shlex.split(_readme_test_command().split("python -m pytest", 1)[1])
  # The README's flags, pinned to two processes (where the hang was seen)
  # whatever the machine's core count; no repository config in tmp_path.
  args[args.index("-n"):args.index("-n") + 2] = ["-n2"]
  proc = subprocess.run(
      [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
      cwd=tmp_path, capture_output=True, text=True, timeout=180)
  out = proc.stdout + proc.stderr
  assert proc.returncode == 1, out
  assert "crashed while running 'test_b.py::test_b2'" in out, out
