"""CI runs exactly the README's test command (.ci/run)."""

import pathlib
import re

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
  readme = (REPO_ROOT / "README.md").read_text()
  section = readme.split("**2. Run the tests:**", 1)[1]
  command = re.search(r"```bash\n(.+?)\n```", section, re.S).group(1).strip()
  ci = (REPO_ROOT / ".ci" / "run").read_text().rstrip().splitlines()
  assert ci[-1] == command
  assert "python -m pytest" in command
