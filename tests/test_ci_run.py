""".ci/run in a sandbox (its system commands stubbed): where it installs what a test needs,
that test is required (fails rather than skips); where it does not, it is not.  Both test
stages run and either failing fails CI; pip installs under the constraints file; apt-get
waits for the dpkg lock and is tried again; the test suite's Slurm jobs left in the queue
are cancelled before the tests."""

import dataclasses
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import textwrap

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _exe(path: pathlib.Path, text: str) -> None:
  path.write_text("#!/bin/sh\n" + textwrap.dedent(text))
  path.chmod(0o755)


@dataclasses.dataclass
class CiRun:
  returncode: int
  output: str
  pytest_env: dict     # the environment the last pytest got
  pytest_calls: list   # each pytest call's arguments (`python`'s: -m pytest ...)
  pip_calls: list
  apt_calls: list
  scancel_calls: list


# A stub's record of one call: its arguments, each followed by the unit separator.
_RECORD = 'printf "%s\\037" "$@" >> {log}; echo >> {log}\n'


def _lines(path: pathlib.Path) -> list:
  if not path.exists():
    return []
  return [l.split("\x1f")[:-1] for l in path.read_text().splitlines()]


def _run_ci(tmp_path: pathlib.Path, uid: int, pytest_rcs=(0, 0), apt_failures: int = 0,
            queued: str = "") -> CiRun:
  """.ci/run in a copy of the repository's layout, as user `uid`, with apt-get, id,
  sinfo, squeue, scancel, sleep and python3 stubbed.  The i-th pytest exits with
  `pytest_rcs[i]`; apt-get fails its first `apt_failures` calls; squeue shows the job
  ids `queued` for this user's jobs of the test suite's name."""
  repo = tmp_path / "repo"
  (repo / ".ci").mkdir(parents=True)
  (repo / "launch").mkdir()
  shutil.copy(REPO_ROOT / ".ci" / "run", repo / ".ci" / "run")
  shutil.copy(REPO_ROOT / ".ci" / "constraints.txt", repo / ".ci" / "constraints.txt")
  _exe(repo / "launch" / "local_slurm.sh", "exit 0\n")
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  log = tmp_path / "log"
  log.mkdir()
  env_out = tmp_path / "pytest_env"
  _exe(bin_dir / "id", f"""\
      case "$1" in -u) echo {uid};; -un) echo user{uid};; *) echo "uid={uid}";; esac
      """)
  # apt-get "installs" pdflatex (after failing `apt_failures` times); a Slurm answers.
  _exe(bin_dir / "apt-get", _RECORD.format(log=log / "apt") + f"""\
      [ "$(wc -l < {log}/apt)" -le {apt_failures} ] && exit 100
      for a in "$@"; do
        [ "$a" = install ] && printf '#!/bin/sh\\n' > {bin_dir}/pdflatex && chmod +x {bin_dir}/pdflatex
      done
      exit 0
      """)
  _exe(bin_dir / "sleep", "exit 0\n")
  _exe(bin_dir / "sinfo", "echo idle\n")
  _exe(bin_dir / "squeue", f"""\
      case "$*" in *"-u user{uid} -n nar_markov_tests"*) printf '{queued}';; esac
      """)
  _exe(bin_dir / "scancel", _RECORD.format(log=log / "scancel"))
  # python3 -m venv .venv: a venv whose pip records its arguments and whose python (pytest)
  # records its arguments and the environment it was started with, and exits with the
  # next of `pytest_rcs`.
  rcs = " ".join(str(rc) for rc in pytest_rcs)
  stubs = tmp_path / "venv_stubs"
  stubs.mkdir()
  _exe(stubs / "pip", _RECORD.format(log=log / "pip"))
  _exe(stubs / "python", f"env > {env_out}\n" + _RECORD.format(log=log / "pytest") + f"""\
      exit $(echo {rcs} | cut -d" " -f$(wc -l < {log / "pytest"}))
      """)
  _exe(bin_dir / "python3", f"""\
      mkdir -p .venv/bin
      cp {stubs}/pip {stubs}/python .venv/bin/
      echo 'PATH="$PWD/.venv/bin:$PATH"' > .venv/bin/activate
      """)
  env = {k: v for k, v in os.environ.items()
         if k not in ("NAR_REQUIRE_PDFLATEX", "NAR_REQUIRE_SLURM", "NAR_FAIL_ON_SKIPS")}
  env.update(PATH=f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", HOME=str(tmp_path),
             NAR_REGEN_GOLDEN="1")
  proc = subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True,
                        env=env, timeout=120, check=False)
  pytest_env = (dict(line.split("=", 1) for line in env_out.read_text().splitlines()
                     if "=" in line) if env_out.exists() else {})
  return CiRun(proc.returncode, proc.stdout + proc.stderr, pytest_env,
               _lines(log / "pytest"), _lines(log / "pip"),
               _lines(log / "apt"), _lines(log / "scancel"))


@pytest.mark.parametrize("uid, required", [(0, "1"), (1000, None)])
def test_what_ci_installs_its_tests_require(uid, required, tmp_path):
  """Was: TeX installed as root, NAR_REQUIRE_PDFLATEX never set, so the LaTeX compile
  tests could skip unseen."""
  run = _run_ci(tmp_path, uid)
  assert run.returncode == 0, run.output
  env = run.pytest_env
  assert env.get("NAR_REQUIRE_PDFLATEX") == required
  assert env.get("NAR_REQUIRE_SLURM") == "1"  # a Slurm answers in both
  # An unlisted skip fails each stage; golden files are compared, never rewritten.
  assert env.get("NAR_FAIL_ON_SKIPS") == "1" and "NAR_REGEN_GOLDEN" not in env


def _readme_commands() -> list:
  section = (REPO_ROOT / "README.md").read_text().split("**2. Run the tests:**", 1)[1]
  block = re.search(r"```bash\n(.+?)\n```", section, re.S).group(1)
  return [shlex.split(l.split("python -m pytest", 1)[1]) for l in block.splitlines()
          if "python -m pytest" in l]


@pytest.mark.parametrize("rcs, passed", [((0, 0), True), ((1, 0), False), ((0, 1), False),
                                         ((5, 0), False), ((0, 5), False), ((2, 1), False)])
def test_both_stages_run_and_ci_fails_if_either_fails(rcs, passed, tmp_path):
  """Stage 2 runs even when stage 1 failed; pytest's exit 5 (no test collected) fails a
  stage, since each has tests."""
  run = _run_ci(tmp_path, 0, pytest_rcs=rcs)
  assert (run.returncode == 0) == passed, run.output
  first, second = _readme_commands()
  assert run.pytest_calls == [["-m", "pytest", *first], ["-m", "pytest", *second]]
  assert first[-2:] == ["-m", "not e2e"] and second[-2:] == ["-m", "e2e"]
  for stage, rc in zip((1, 2), rcs):
    if rc == 5:
      assert f"stage {stage}: no test collected (pytest exit 5)" in run.output
  if not passed:
    failed = " ".join(str(s) for s, rc in zip((1, 2), rcs) if rc)
    assert f"CI failed: stage(s) {failed}" in run.output, run.output


def test_pip_installs_under_the_constraints_file(tmp_path):
  run = _run_ci(tmp_path, 1000)
  assert run.returncode == 0, run.output
  assert len(run.pip_calls) == 2
  for call in run.pip_calls:
    assert call[call.index("-c") + 1] == ".ci/constraints.txt", call


def test_the_constraints_pin_every_package_and_not_the_project():
  pins = {}
  for line in (REPO_ROOT / ".ci" / "constraints.txt").read_text().splitlines():
    if line.strip() and not line.startswith("#"):
      name, _, version = line.partition("==")
      assert version and re.fullmatch(r"[A-Za-z0-9_.+-]+", version), line
      pins[name.lower().replace("_", "-")] = version
  assert "nar-markov" not in pins
  # What setup.cfg pins is what the constraints pin; dm-clrs's unpinned tfds-nightly is pinned.
  setup = (REPO_ROOT / "setup.cfg").read_text()
  for name, version in re.findall(r"^\s+([a-z][a-z0-9_-]*)==([0-9.]+)$", setup, re.M):
    if not name.startswith("jax-cuda") and name != "jax[cuda12]":
      assert pins.get(name) == version, name
  for name in ("tfds-nightly", "tensorflow", "pytest", "pytest-timeout", "pip"):
    assert name in pins, name


def test_apt_get_waits_for_the_lock_and_is_tried_again(tmp_path):
  run = _run_ci(tmp_path, 0, apt_failures=2)
  assert run.returncode == 0, run.output
  # update failed twice, then update and install.
  assert [c[c.index("-o") + 4] for c in run.apt_calls] == ["update"] * 3 + ["install"]
  for call in run.apt_calls:
    assert call[:4] == ["-o", "DPkg::Lock::Timeout=600", "-o", "Acquire::Retries=3"], call
  assert "apt-get update failed (try 2 of 5); again in 30 s" in run.output


def test_apt_get_failing_every_try_fails_ci(tmp_path):
  run = _run_ci(tmp_path, 0, apt_failures=99)
  assert run.returncode != 0 and run.pytest_calls == []
  assert len(run.apt_calls) == 5 and "apt-get update failed 5 times" in run.output


def _suite_job_name() -> str:
  return re.search(r'^TEST_JOB_NAME = "([^"]+)"$',
                   (REPO_ROOT / "tests" / "test_slurm.py").read_text(), re.M).group(1)


@pytest.mark.parametrize("queued", ["", "17_0\n17_1\n18\n"])
def test_the_suites_leftover_slurm_jobs_are_cancelled_before_the_tests(queued, tmp_path):
  """A CI run killed at its limit can leave the Slurm tests' jobs (some held back an hour)
  in the queue: this user's jobs of the name tests/test_slurm.py gives its jobs are
  cancelled, nobody else's and no other name."""
  assert _suite_job_name() == "nar_markov_tests"  # the name the stubbed squeue answers for
  run = _run_ci(tmp_path, 0, queued=queued)
  assert run.returncode == 0, run.output
  if queued:
    assert run.scancel_calls == [["-u", "user0", "-n", "nar_markov_tests"]]
    assert "cancelling the test suite's jobs left in Slurm's queue: 17_0 17_1 18" in run.output
  else:
    assert run.scancel_calls == []
