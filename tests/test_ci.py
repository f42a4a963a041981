"""CI runs exactly the README's test commands (.ci/run), stage by stage; those commands
end, failed, when a test process dies."""

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_commands_in_order():
  commands = _readme_test_commands()
  ci_tests = [line for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()
              if "python -m pytest" in line]
  assert ci_tests == commands
  # Two stages: the suite without its end-to-end tests, then those, with the same flags.
  assert len(commands) == 2
  first, second = (shlex.split(c) for c in commands)
  assert first[-2:] == ["-m", "not e2e"] and second[-2:] == ["-m", "e2e"]
  assert first[:-2] == second[:-2]


def _readme_test_commands() -> list:
  readme = (REPO_ROOT / "README.md").read_text()
  section = readme.split("**2. Run the tests:**", 1)[1]
  block = re.search(r"```bash\n(.+?)\n```", section, re.S).group(1)
  return [line.strip() for line in block.splitlines()
          if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.e2e
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
  args = shlex.split(_readme_test_commands()[0].split("python -m pytest", 1)[1])
  # The README's flags, pinned to two processes (where the hang was seen)
  # whatever the machine's core count; no repository config in tmp_path.
  args[args.index("-n"):args.index("-n") + 2] = ["-n2"]
  proc = subprocess.run(
      [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
      cwd=tmp_path, capture_output=True, text=True, timeout=180)
  out = proc.stdout + proc.stderr
  assert proc.returncode == 1, out
  assert "crashed while running 'test_b.py::test_b2'" in out, out


def _suite_with_skips(tmp_path) -> pathlib.Path:
  """A suite with tests/skip_allowlist.py enabled, one listed and one unlisted skip."""
  (tmp_path / "skip_allowlist.py").write_text(
      (REPO_ROOT / "tests" / "skip_allowlist.py").read_text())
  (tmp_path / "conftest.py").write_text('pytest_plugins = ["skip_allowlist"]\n')
  (tmp_path / "test_s.py").write_text(
      "import pytest\n"
      "def test_passes(): pass\n"
      "def test_listed(): pytest.skip('no frobnicator here (allowed)')\n"
      "@pytest.mark.skipif(True, reason='no widget installed')\n"
      "def test_unlisted(): pass\n"
      "@pytest.mark.xfail(reason='expected', strict=True)\n"
      "def test_xfails(): assert False\n")
  allowed = tmp_path / "allowed.txt"
  allowed.write_text("# a comment\n\n"
                     "test_s.py::test_list* | no frobnicator here* | a property of the machine\n")
  return allowed


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_under_ci_an_unlisted_skip_fails_the_run_and_is_named(workers, tmp_path):
  """CI=true: the unlisted skip fails the run (exit 1) and the summary names it, not the
  listed one; without CI the same suite passes with its two skips."""
  allowed = _suite_with_skips(tmp_path)
  env = {k: v for k, v in os.environ.items() if k not in ("CI", "NAR_FAIL_ON_SKIPS")}
  env["NAR_SKIPS_ALLOWED"] = str(allowed)
  run = lambda **more: subprocess.run(
      [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *workers],
      cwd=tmp_path, capture_output=True, text=True, timeout=120, env=dict(env, **more))
  proc = run(CI="true")
  out = proc.stdout + proc.stderr
  assert proc.returncode == 1, out
  unlisted = [l for l in out.splitlines() if l.startswith("UNLISTED SKIP")]
  assert unlisted == ["UNLISTED SKIP test_s.py::test_unlisted: no widget installed"], out
  assert "1 passed, 2 skipped, 1 xfailed" in out, out
  assert run(NAR_FAIL_ON_SKIPS="1").returncode == 1
  proc = run()
  assert proc.returncode == 0 and "UNLISTED" not in proc.stdout, proc.stdout + proc.stderr
  # Every skip listed: CI passes.
  allowed.write_text(allowed.read_text() + "test_s.py::* | no widget* | optional widget\n")
  proc = run(CI="true")
  assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_allowlist_line_without_its_reason_is_refused(tmp_path):
  allowed = _suite_with_skips(tmp_path)
  allowed.write_text("test_s.py::* | no widget*\n")
  env = dict(os.environ, CI="true", NAR_SKIPS_ALLOWED=str(allowed))
  proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"],
                        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
  assert proc.returncode != 0
  assert "allowed.txt:1: want 'test id pattern | reason pattern | why it is allowed'" in (
      proc.stdout + proc.stderr)


def test_the_repository_allowlist_reads_and_says_why_for_each_line():
  sys.path.insert(0, str(REPO_ROOT / "tests"))
  try:
    import skip_allowlist  # pylint: disable=g-import-not-at-top
  finally:
    sys.path.pop(0)
  entries = skip_allowlist.read_allowlist(skip_allowlist.ALLOWLIST)
  assert entries and all(len(e.why.split()) >= 5 for e in entries)
  # CI installs Slurm and TeX and runs as root: those skips stay unlisted.
  for reason in ("Slurm is not installed (no sbatch on PATH)",
                 "no pdflatex on this machine (apt-get install texlive-latex-base)"):
    assert not any(e.matches("tests/test_slurm.py::test_x", reason)
                   or e.matches("tests/test_analysis.py::test_x", reason) for e in entries)
