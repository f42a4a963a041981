"""A pytest plugin: under CI, a skipped test fails the run unless its skip is listed.

Active where CI=true or NAR_FAIL_ON_SKIPS=1 (.ci/run sets it).  Each skip (a
`pytest.skip`, a `skipif` mark) is compared with the lines of the allowlist,
tests/skips_allowed.txt (NAR_SKIPS_ALLOWED: another file), each
`test id pattern | reason pattern | why it is allowed` (fnmatch patterns on pytest's node id
and on the skip's reason; the third field must say why).  A skip no line matches is
unlisted: the session's exit status becomes 1 (tests failed) and the summary names each
unlisted skip with its reason.  A test that skips and passes nothing is then not green.
Under pytest-xdist the controller collects the workers' reports and decides.
Enabled from tests/conftest.py (`pytest_plugins`).
"""

import dataclasses
import fnmatch
import os
import pathlib
from typing import List, Tuple

import pytest

ALLOWLIST = pathlib.Path(__file__).with_name("skips_allowed.txt")


@dataclasses.dataclass(frozen=True)
class Allowed:
  test: str
  reason: str
  why: str

  def matches(self, nodeid: str, reason: str) -> bool:
    return fnmatch.fnmatchcase(nodeid, self.test) and fnmatch.fnmatchcase(reason, self.reason)


def active() -> bool:
  return os.environ.get("CI") == "true" or os.environ.get("NAR_FAIL_ON_SKIPS") == "1"


def read_allowlist(path: pathlib.Path) -> List[Allowed]:
  """The allowlist's entries; ValueError naming the line for one without its three fields."""
  entries = []
  for number, line in enumerate(path.read_text().splitlines(), 1):
    if not line.strip() or line.lstrip().startswith("#"):
      continue
    fields = [f.strip() for f in line.split(" | ")]
    if len(fields) != 3 or not all(fields):
      raise ValueError(f"{path}:{number}: want 'test id pattern | reason pattern | why it "
                       f"is allowed', got {line!r}")
    entries.append(Allowed(*fields))
  return entries


def skip_reason(report) -> str:
  """The reason pytest gives for a skipped test (the text `-rs` prints after "Skipped: ")."""
  longrepr = report.longrepr
  if isinstance(longrepr, tuple) and len(longrepr) == 3:
    reason = str(longrepr[2])
  else:
    reason = str(longrepr)
  return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason


class _SkipAllowlist:
  """Records every skip the session reports and fails the session on unlisted ones."""

  def __init__(self, entries: List[Allowed]):
    self.entries = entries
    self.unlisted: List[Tuple[str, str]] = []

  def pytest_runtest_logreport(self, report):
    # A skip is reported once, by the phase that skipped (setup for marks and fixtures,
    # call for pytest.skip in the test's body); xfail is not a skip.
    if not report.skipped or hasattr(report, "wasxfail"):
      return
    reason = skip_reason(report)
    if not any(e.matches(report.nodeid, reason) for e in self.entries):
      self.unlisted.append((report.nodeid, reason))

  @pytest.hookimpl(trylast=True)
  def pytest_sessionfinish(self, session):
    if self.unlisted and session.exitstatus in (pytest.ExitCode.OK,
                                                pytest.ExitCode.NO_TESTS_COLLECTED):
      session.exitstatus = pytest.ExitCode.TESTS_FAILED

  def pytest_terminal_summary(self, terminalreporter):
    if not self.unlisted:
      return
    terminalreporter.section("skips not in the allowlist (each fails this run)", red=True)
    for nodeid, reason in self.unlisted:
      terminalreporter.line(f"UNLISTED SKIP {nodeid}: {reason}", red=True)
    terminalreporter.line(f"(CI=true or NAR_FAIL_ON_SKIPS=1; allowed skips: {_path()})")


def _path() -> pathlib.Path:
  return pathlib.Path(os.environ.get("NAR_SKIPS_ALLOWED", ALLOWLIST))


def pytest_configure(config):
  # Under pytest-xdist only the controller decides: it sees every worker's reports.
  if not active() or hasattr(config, "workerinput"):
    return
  config.pluginmanager.register(_SkipAllowlist(read_allowlist(_path())), "skip_allowlist_session")
