"""One-off (issue 74): rewrite the old flat nar_markov module paths to the subpackages.

python scripts/rewrite_module_paths.py FILE...   (rewrites in place; prints the files changed)
"""
import pathlib
import re
import sys

MAP = {
 "runs": "store.runs", "params_io": "store.params_io", "util": "store.util",
 "config": "config.gin_files", "netconfig": "config.netconfig", "clrs30": "config.clrs30",
 "provenance": "config.provenance", "runspec": "config.runspec",
 "lambda_heuristic": "config.lambda_heuristic",
 "checkpoint": "state.checkpoint", "selection": "state.selection",
 "lambda_schedule": "state.lambda_schedule",
 "data": "data.pipeline",
 "model": "nets.model", "fastnet": "nets.fastnet", "learner": "nets.learner",
 "train": "training.train", "experiment": "training.experiment",
 "calibrate": "training.calibrate", "devices": "training.devices",
 "evaluate": "probes.evaluate", "replay": "tools.replay",
}
_NEW = "\x00nar_markov\x00"  # a rewritten path, not matched again
NAMES = "|".join(sorted(MAP, key=len, reverse=True))
FROM_IMPORT = re.compile(r"^(\s*)from nar_markov import (\w+)(\s+as\s+\w+)?", re.M)
DOTTED = re.compile(rf"\bnar_markov\.({NAMES})\b(?![\w/-])")
PATH = re.compile(rf"\bnar_markov/({NAMES})\.py\b")
PYM = re.compile(rf"(-m\s+)nar_markov\.({NAMES})\b")


def _from(m):
  indent, name, alias = m.group(1), m.group(2), m.group(3)
  if name not in MAP:
    return m.group(0)
  pkg, _, new = MAP[name].rpartition(".")
  if alias is None and new != name:
    alias = f" as {name}"
  return f"{indent}from {_NEW}.{pkg} import {new}{alias or ''}"


def rewrite(text: str, commands_only: bool = False) -> str:
  if commands_only:
    return PYM.sub(lambda m: m.group(1) + "nar_markov." + MAP[m.group(2)], text)
  text = FROM_IMPORT.sub(_from, text)
  text = DOTTED.sub(lambda m: _NEW + "." + MAP[m.group(1)], text)
  text = PATH.sub(lambda m: "nar_markov/" + MAP[m.group(1)].replace(".", "/") + ".py", text)
  return text.replace(_NEW, "nar_markov")


def main(argv):
  commands_only = "--commands-only" in argv
  for name in [a for a in argv if not a.startswith("--")]:
    path = pathlib.Path(name)
    old = path.read_text(encoding="utf-8")
    new = rewrite(old, commands_only)
    if new != old:
      path.write_text(new, encoding="utf-8")
      print(path)


if __name__ == "__main__":
  main(sys.argv[1:])
