"""tests/file_order.py: the files run longest first; a session records its seconds per file."""

import json
import os
import subprocess
import sys
import textwrap

import file_order


def test_files_run_longest_first_and_tests_keep_their_order_inside_a_file():
  ids = ["tests/a.py::t1", "tests/a.py::t2", "tests/b.py::t1", "tests/new.py::t1",
         "tests/c.py::t1", "tests/c.py::t2", "tests/other_new.py::t"]
  costs = {"tests/a.py": 5.0, "tests/b.py": 80.0, "tests/c.py": 20.0}
  order = [ids[i] for i in file_order.longest_first(ids, costs)]
  assert order == ["tests/b.py::t1", "tests/c.py::t1", "tests/c.py::t2", "tests/a.py::t1",
                   "tests/a.py::t2", "tests/new.py::t1", "tests/other_new.py::t"]
  assert [ids[i] for i in file_order.longest_first(ids, {})] == ids


def test_a_session_under_xdist_runs_the_long_file_first_and_records_its_seconds(tmp_path):
  (tmp_path / "conftest.py").write_text("pytest_plugins = ['file_order']\n")
  for name, sleep in [("test_a_short.py", 0.0), ("test_z_long.py", 0.3)]:
    (tmp_path / name).write_text(textwrap.dedent(f"""\
        import time
        def test_one():
          time.sleep({sleep})
        def test_two():
          time.sleep({sleep})
        """))
  out = tmp_path / "costs.json"
  out.write_text(json.dumps({"test_gone.py": 1.0}))
  env = {**os.environ, "PYTHONPATH": str(file_order.COSTS.parent),
         "NAR_TEST_COSTS": str(out), "NAR_TEST_COSTS_OUT": str(out)}

  def session():
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v",
         "--no-loadscope-reorder", "-n", "1", "--dist", "loadfile", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout

  first = session()  # no cost for either file: collection order
  assert first.index("test_a_short.py::test_one") < first.index("test_z_long.py::test_one")
  costs = json.loads(out.read_text())
  assert costs["test_gone.py"] == 1.0  # a file this session did not run keeps its entry
  assert costs["test_z_long.py"] >= 0.6 > costs["test_a_short.py"]
  second = session()  # with the table it wrote, the long file is handed out first
  assert second.index("test_z_long.py::test_one") < second.index("test_a_short.py::test_one")
