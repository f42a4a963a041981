"""The order the test files run in: longest first, so that under `--dist loadfile` the two
workers finish together (a greedy longest-first schedule: each worker takes the next file when
it runs out).

pytest-xdist hands out whole files in the order of the collection (setup.cfg turns off its own
reordering by test count, `--no-loadscope-reorder`); this plugin sorts the collection by each
file's measured seconds in tests/file_costs.json, the longest first, keeping the order of the
tests inside a file. A file not in it (a new one) comes after those that are, in collection
order. The same sort runs in every worker, so their collections stay identical.
NAR_TEST_COSTS=FILE reads the table from FILE instead.

NAR_TEST_COSTS_OUT=FILE records this session's seconds per file (setup + call + teardown of
each test, summed in the controller) into FILE, keeping the entries of files this session did
not run: `NAR_TEST_COSTS_OUT=tests/file_costs.json` with each of the README's two test commands
remakes the committed table.
"""

import json
import os
import pathlib
from typing import Dict

import pytest

COSTS = pathlib.Path(__file__).with_name("file_costs.json")


def _file(nodeid: str) -> str:
  return nodeid.split("::", 1)[0]


def read_costs(path=COSTS) -> Dict[str, float]:
  """{test file as a node id ("tests/test_x.py"): seconds}; {} where there is no table."""
  try:
    text = pathlib.Path(path).read_text()
  except FileNotFoundError:
    return {}
  costs = json.loads(text)
  if not isinstance(costs, dict) or not all(
      isinstance(k, str) and isinstance(v, (int, float)) for k, v in costs.items()):
    raise pytest.UsageError(f"{path}: not a JSON object of test file -> seconds")
  return costs


def longest_first(nodeids, costs: Dict[str, float]):
  """The positions of `nodeids` in run order: files by cost, longest first (ties and files
  without a cost in collection order, those after every costed one)."""
  first = {}
  for i, nodeid in enumerate(nodeids):
    first.setdefault(_file(nodeid), i)

  def key(i):  # sorted() is stable: tests keep their order inside a file
    f = _file(nodeids[i])
    return (f not in costs, -costs.get(f, 0.0), first[f])

  return sorted(range(len(nodeids)), key=key)


def pytest_collection_modifyitems(config, items):
  costs = read_costs(os.environ.get("NAR_TEST_COSTS", COSTS))
  if costs:
    order = longest_first([item.nodeid for item in items], costs)
    items[:] = [items[i] for i in order]


class _CostRecorder:
  """Sums each file's test durations as the controller receives its reports."""

  def __init__(self, out: pathlib.Path):
    self.out = out
    self.seconds: Dict[str, float] = {}

  def pytest_runtest_logreport(self, report):
    f = _file(report.nodeid)
    self.seconds[f] = self.seconds.get(f, 0.0) + float(report.duration)

  def pytest_sessionfinish(self, session):
    if not self.seconds:
      return
    costs = read_costs(self.out)
    costs.update({f: round(s, 1) for f, s in self.seconds.items()})
    self.out.write_text(json.dumps(dict(sorted(costs.items())), indent=1) + "\n")


def pytest_configure(config):
  out = os.environ.get("NAR_TEST_COSTS_OUT")
  # Under pytest-xdist only the controller records: it receives every worker's reports.
  if out and not hasattr(config, "workerinput"):
    config.pluginmanager.register(_CostRecorder(pathlib.Path(out)), "file_costs_recorder")
