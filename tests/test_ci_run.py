""".ci/run in a sandbox (its system commands stubbed): where it installs what a test needs,
that test is required (fails rather than skips); where it does not, it is not."""

import os
import pathlib
import shutil
import subprocess
import textwrap

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _exe(path: pathlib.Path, text: str) -> None:
  path.write_text("#!/bin/sh\n" + textwrap.dedent(text))
  path.chmod(0o755)


def _run_ci(tmp_path: pathlib.Path, uid: int) -> dict:
  """.ci/run in a copy of the repository's layout, as user `uid`, with apt-get, id,
  sinfo and python3 stubbed; the environment its last command (pytest) got."""
  repo = tmp_path / "repo"
  (repo / ".ci").mkdir(parents=True)
  (repo / "launch").mkdir()
  shutil.copy(REPO_ROOT / ".ci" / "run", repo / ".ci" / "run")
  _exe(repo / "launch" / "local_slurm.sh", "exit 0\n")
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  env_out = tmp_path / "pytest_env"
  _exe(bin_dir / "id", f"""\
      case "$1" in -u) echo {uid};; -un) echo user{uid};; *) echo "uid={uid}";; esac
      """)
  # apt-get "installs" pdflatex; a Slurm answers.
  _exe(bin_dir / "apt-get", f"""\
      [ "$1" = install ] && printf '#!/bin/sh\\n' > {bin_dir}/pdflatex && chmod +x {bin_dir}/pdflatex
      exit 0
      """)
  _exe(bin_dir / "sinfo", "echo idle\n")
  # python3 -m venv .venv: a venv whose pip does nothing and whose python records the
  # environment it was started with.
  _exe(bin_dir / "python3", f"""\
      mkdir -p .venv/bin
      printf '#!/bin/sh\\nexit 0\\n' > .venv/bin/pip
      printf '#!/bin/sh\\nenv > {env_out}\\n' > .venv/bin/python
      chmod +x .venv/bin/pip .venv/bin/python
      echo 'PATH="$PWD/.venv/bin:$PATH"' > .venv/bin/activate
      """)
  env = {k: v for k, v in os.environ.items()
         if k not in ("NAR_REQUIRE_PDFLATEX", "NAR_REQUIRE_SLURM")}
  env.update(PATH=f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", HOME=str(tmp_path))
  proc = subprocess.run(["bash", str(repo / ".ci" / "run")], capture_output=True, text=True,
                        env=env, timeout=120, check=False)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  return dict(line.split("=", 1) for line in env_out.read_text().splitlines() if "=" in line)


@pytest.mark.parametrize("uid, required", [(0, "1"), (1000, None)])
def test_what_ci_installs_its_tests_require(uid, required, tmp_path):
  """Was: TeX installed as root, NAR_REQUIRE_PDFLATEX never set, so the LaTeX compile
  tests could skip unseen."""
  env = _run_ci(tmp_path, uid)
  assert env.get("NAR_REQUIRE_PDFLATEX") == required
  assert env.get("NAR_REQUIRE_SLURM") == "1"  # a Slurm answers in both
