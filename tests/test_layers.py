"""The layout docs/architecture.md draws: the library installs and imports without the
launcher, what a run is imports no jax, and no module imports one that imports it back."""

import ast
import pathlib
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("nar_markov", "launch", "analysis", "benchmarks")
# The jax-free layers, by folder: what a run is (config/), the results store (store/), a
# seed's state (state/) and the Markov rule (markov/) -- the launcher's planning, --status
# and analysis/ read them -- and the package's own top-level modules.  Every module in them
# is checked, so a new one is covered without a list to update.
JAX_FREE_PACKAGES = ("config", "store", "state", "markov")


def jax_free_modules() -> list:
  names = [f"nar_markov.{p.stem}" for p in (REPO_ROOT / "nar_markov").glob("*.py")
           if p.stem != "__init__"]
  for package in JAX_FREE_PACKAGES:
    for path in sorted((REPO_ROOT / "nar_markov" / package).rglob("*.py")):
      name = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
      names.append(name.removesuffix(".__init__"))
  return sorted(names)


HEAVY = ("jax", "jaxlib", "haiku", "clrs", "tensorflow", "optax")


def _run(code: str) -> str:
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                        text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  return proc.stdout


def test_every_library_module_imports_without_submitit():
  """submitit is the launcher's (setup.cfg's `launch` extra): a process that cannot import
  it still imports every nar_markov module, and cannot import the launcher's job class."""
  out = _run(
      "import importlib, importlib.abc, pkgutil, sys\n"
      "class Block(importlib.abc.MetaPathFinder):\n"
      "  def find_spec(self, name, path=None, target=None):\n"
      "    if name == 'submitit' or name.startswith('submitit.'):\n"
      "      raise ImportError('submitit blocked')\n"
      "sys.meta_path.insert(0, Block())\n"
      "import nar_markov\n"
      "names = sorted(m.name for m in pkgutil.walk_packages(nar_markov.__path__, 'nar_markov.'))\n"
      "for name in names:\n"
      "  importlib.import_module(name)\n"
      "try:\n"
      "  import launch.sweep_spec\n"
      "  print('LAUNCHER IMPORTED')\n"
      "except ImportError:\n"
      "  pass\n"
      "print('IMPORTED', len(names), 'submitit' in sys.modules)\n")
  assert "LAUNCHER IMPORTED" not in out
  _, count, submitit = out.split()[-3:]
  assert int(count) > 20 and submitit == "False", out


def test_what_a_run_is_imports_no_jax():
  names = jax_free_modules()
  assert "nar_markov.store.runs" in names and "nar_markov.config.runspec" in names
  out = _run("import importlib, sys\n"
             f"for name in {names!r}:\n"
             "  importlib.import_module(name)\n"
             f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
  assert out.splitlines()[-1] == "[]"


def _imports() -> dict:
  """Module -> the project's modules it imports (any import statement, at any depth)."""
  files = {}
  for package in PACKAGES:
    for path in (REPO_ROOT / package).rglob("*.py"):
      name = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
      files[name.removesuffix(".__init__")] = path
  graph = {}
  for name, path in files.items():
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        targets.update(a.name for a in node.names)
      elif isinstance(node, ast.ImportFrom) and node.module:
        subs = {f"{node.module}.{a.name}" for a in node.names} & set(files)
        targets.update(subs or {node.module})
    graph[name] = {t for t in targets if t in files and t != name}
  return graph


def test_no_import_circle():
  graph = _imports()
  assert "nar_markov.config.runspec" in graph["nar_markov.training.train"]
  done, path = set(), []

  def visit(module):
    if module in path:
      raise AssertionError("import circle: " + " -> ".join(path[path.index(module):] + [module]))
    if module in done:
      return
    path.append(module)
    for target in sorted(graph[module]):
      visit(target)
    path.pop()
    done.add(module)

  for module in sorted(graph):
    visit(module)


def test_the_library_never_imports_the_launcher_or_the_analysis():
  graph = _imports()
  up = sorted((m, t) for m, targets in graph.items() if m.startswith("nar_markov")
              for t in targets if not t.startswith("nar_markov"))
  assert up == []
