"""A sweep's gin files and bindings, checked before gin parses them: one line per problem.

gin takes several inputs that give another sweep than the one asked for without a word:
a model file after an overlay (its `include 'gin/base.gin'` binds the protocol again, so
`--gin gin/slurm_gpu.gin --gin gin/forget.gin` drops the GPU request), two model files
(the last one wins), and a binding on a component the model does not use
(`GatePenalty.lambda_gate=0.1` on the baseline).  Others fail with gin's own riddles
(`SEEDS=[0,1` -> "EOF in multi-line statement", an unquoted string -> "<ast.Name object
at 0x...>").  `check_files` and `check_binding_syntax` run before gin parses anything,
`check_used` after (it needs the model's components); each raises ValueError with the
flag or binding named.  Imports no jax.
"""

from __future__ import annotations

import pathlib
import re
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from gin import config as gin_config
from gin import config_parser

from nar_markov.config import gin_files as config_lib

# A binding's key: (scope, configurable or macro, parameter; '' for a macro).
Key = Tuple[str, str, str]


def _statements(text: str, where: str) -> list:
  """gin's statements of `text` (imports, includes, bindings), configurables not looked up."""
  try:
    return list(config_parser.ConfigParser(text, gin_config.ParserDelegate(skip_unknown=True)))
  except Exception as e:  # pylint: disable=broad-except  (gin raises SyntaxError, TokenError, ...)
    raise ValueError(f"{where}: {_why_unparsable(text, e)}") from None


def _why_unparsable(text: str, error: Exception) -> str:
  message = " ".join(str(error).split())
  token = re.search(r"Failed to parse token '([^']*)'", message)
  if token and "ast.Name" in message:
    name = token.group(1)
    quoted = re.sub(rf"=\s*{re.escape(name)}\b", f"='{name}'", text.strip(), count=1)
    return (f"{name} is not a value gin knows (a number, a list, None, True, @name(), "
            f"%MACRO): to give the string, quote it: {quoted}")
  if "EOF in multi-line statement" in message or re.search(r"Expected '[,\])}]'", message):
    return "does not parse: a bracket or quote is not closed"
  return f"does not parse ({message})"


def check_binding_syntax(gin_params: Sequence[str]) -> None:
  """Checks that gin can parse each of `gin_params`, before gin parses anything.

  Raises:
    ValueError: naming the first binding gin cannot parse, and why.
  """
  for param in gin_params:
    _statements(param, f"--gin_param {param!r}")


def bound_keys(gin_params: Sequence[str]) -> List[Tuple[Key, str]]:
  """The keys of the bindings in `gin_params`.

  Returns:
    (key, the binding it came from) for every binding statement, in order; a key is
    (scope, the selector's last part, parameter; '' for a macro).

  Raises:
    ValueError: as `check_binding_syntax`.
  """
  out = []
  for param in gin_params:
    for s in _statements(param, f"--gin_param {param!r}"):
      if isinstance(s, config_parser.BindingStatement):
        out.append(((s.scope or "", s.selector.rpartition(".")[2], s.arg_name or ""), param))
  return out


def _comparable(value: Any) -> Any:
  """`value` as parsed by gin, in a form two parses of the same text compare equal in."""
  if isinstance(value, (list, tuple)):
    return (type(value).__name__, tuple(_comparable(v) for v in value))
  if isinstance(value, dict):
    return ("dict", tuple(sorted((repr(k), _comparable(v)) for k, v in value.items())))
  if hasattr(value, "selector") or type(value).__name__.endswith("Reference"):
    return ("ref", str(getattr(value, "selector", value)), getattr(value, "evaluate", None),
            str(value) if not hasattr(value, "selector") else "")
  return value


class _File:
  """A gin file as given on the command line: its bindings with its includes', whether it
  is a model file (it includes another file, e.g. gin/base.gin, or sets the label)."""

  def __init__(self, given: str):
    self.given = given
    self.path = pathlib.Path(config_lib.resolve_gin_file(given))
    self.includes: List[str] = []
    self.bindings: Dict[Key, Any] = {}
    self._read(self.path, set())

  def _read(self, path: pathlib.Path, seen: set) -> None:
    if path in seen:
      return
    seen.add(path)
    for s in _statements(path.read_text(), f"--gin {self.given}"):
      if isinstance(s, config_parser.IncludeStatement):
        if path == self.path:
          self.includes.append(s.filename)
        self._read(pathlib.Path(config_lib.resolve_gin_file(s.filename)), seen)
      elif isinstance(s, config_parser.BindingStatement):
        key = (s.scope or "", s.selector.rpartition(".")[2], s.arg_name or "")
        self.bindings[key] = _comparable(s.value)

  @property
  def is_model(self) -> bool:
    return bool(self.includes) or ("", "run_experiment", "model") in self.bindings


def _name(key: Key) -> str:
  scope, selector, arg = key
  return (f"{scope}/" if scope else "") + selector + (f".{arg}" if arg else "")


def check_files(gin_files: Sequence[str]) -> None:
  """Checks that the order of `gin_files` does not decide what the sweep is.

  A model file first and overlays after it, each binding what no other overlay binds
  otherwise, give the same sweep in any order of the overlays.  A model file is one that
  includes another file (e.g. gin/base.gin) or sets run_experiment.model; its includes'
  bindings count as its own.

  Raises:
    ValueError: two model files; a file that binds again, to another value, what an
      earlier overlay bound; a file (or one it includes) not found or not parsable.
  """
  files = [_File(f) for f in gin_files]
  models = [f for f in files if f.is_model]
  if len(models) > 1:
    raise ValueError(
        f"--gin {models[0].given} and --gin {models[1].given} are both model files (each "
        "sets run_experiment.model or includes gin/base.gin); the last would silently "
        "replace the first: give one model file, then overlays")
  for i, later in enumerate(files):
    for earlier in files[:i]:
      if earlier.is_model:
        continue  # an overlay after the model file overrides it: what overlays are for
      clash = sorted(_name(k) for k, v in earlier.bindings.items()
                     if k in later.bindings and later.bindings[k] != v)
      if not clash:
        continue
      what = (f"the model file --gin {later.given} (its include of "
              f"{', '.join(later.includes)}) binds again" if later.is_model and later.includes
              else f"--gin {later.given} binds otherwise")
      more = f" and {len(clash) - 3} more" if len(clash) > 3 else ""
      raise ValueError(
          f"{what} what the overlay --gin {earlier.given} before it bound "
          f"({', '.join(clash[:3])}{more}), so the order of the files would decide the "
          "sweep: " + ("put the model file first, overlays after it" if later.is_model
                       else "give one of the two, or bind the value with --gin_param"))


def check_used(gin_params: Sequence[str], unused: Mapping[str, str]) -> None:
  """Checks that no binding of `gin_params` is on a component the model does not use.

  gin would take such a binding and the sweep train without it.  Run after gin has parsed
  the model's files.

  Args:
    gin_params: the --gin_param bindings.
    unused: components.unused_components: 'GatePenalty', 'NetConfig.gate_bias_init', ...
      -> why the model does not use it.

  Raises:
    ValueError: the first binding on a component or parameter in `unused`, with why.
  """
  for (_, selector, arg), param in bound_keys(gin_params):
    why = unused.get(f"{selector}.{arg}", unused.get(selector))
    if why is not None:
      raise ValueError(f"--gin_param {param!r}: {why}, so this binding would change "
                       "nothing; leave it out (or use a model file that uses it)")
