"""What G-ForgetNet's penalty did to its history gate, channel by channel, before and after.

    python -m analysis.gate_channels --before <lambda0 run>/history_gate.json \
        --after <gforget run>/history_gate.json [--top 4] [--out gate_channels.md]

Both files are `python -m nar_markov.probes.evaluate <run> --history-gate --json <file>`:
--before on the λ = 0 run a G-ForgetNet run continued from (the schedule reading: its state at
the switch), --after on that G-ForgetNet run, at its tested checkpoint. Continued from one
state, channel k is the same channel in both, so they compare channel by channel.

It prints (and with --out writes) markdown: per file the mean |g|, |h(t-1)| and |g*h(t-1)| per
sqrt(d), and the rank correlation over channels of the gate with |h(t-1)|; the --top channels
that carried most of |g*h|^2 before, with their gate and |h| before and after and the share
they carry after; and the mean gate on the quarter of channels where |h(t-1)| was largest
before against the quarter where it was smallest. The penalty is on ||g||: this says whether it
shut the channels that carry the history or only the quiet ones.
"""

import argparse
import json
import pathlib
import sys

import numpy as np


def load_gate(path) -> dict:
  """The history-gate measure of the first scored split in an evaluate --json file.

  Raises:
    ValueError: unreadable JSON, no --history-gate measure, or one without per-channel
      figures (written before they were measured: run the probe again).
  """
  try:
    data = json.loads(pathlib.Path(path).read_text())
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"{path}: not a readable evaluate --json file ({e})") from None
  gates = [s["history_gate"] for s in data.get("scores", []) if "history_gate" in s]
  if not gates:
    raise ValueError(f"{path}: no history_gate measure (evaluate ... --history-gate --json)")
  if "channels" not in gates[0]:
    raise ValueError(f"{path}: no per-channel figures; run evaluate --history-gate again")
  return dict(gates[0], run_dir=data.get("run_dir"), step=data.get("step"),
              test_score=data["scores"][0].get("score"))


def compare(before: dict, after: dict, top: int = 4) -> dict:
  """The figures of the module docstring, as a dict (what `to_markdown` prints).

  Raises:
    ValueError: the two have different numbers of channels.
  """
  b, a = ({k: np.asarray(v, np.float64) for k, v in m["channels"].items()}
          for m in (before, after))
  d = len(b["rms_g"])
  if len(a["rms_g"]) != d:
    raise ValueError(f"the two measures have {d} and {len(a['rms_g'])} channels: not one net")
  carriers = np.argsort(-b["share"], kind="stable")[:top]
  by_h = np.argsort(-b["rms_h"], kind="stable")
  quarter = max(1, d // 4)
  loud, quiet = by_h[:quarter], by_h[-quarter:]
  return {
      "channels": d,
      "carriers": [{"channel": int(k), "share_before": float(b["share"][k]),
                    "share_after": float(a["share"][k]),
                    "g_before": float(b["rms_g"][k]), "g_after": float(a["rms_g"][k]),
                    "h_before": float(b["rms_h"][k]), "h_after": float(a["rms_h"][k])}
                   for k in carriers],
      "carriers_share": (float(b["share"][carriers].sum()), float(a["share"][carriers].sum())),
      "loud_gate": (float(b["rms_g"][loud].mean()), float(a["rms_g"][loud].mean())),
      "quiet_gate": (float(b["rms_g"][quiet].mean()), float(a["rms_g"][quiet].mean())),
      "quarter": quarter,
  }


def to_markdown(before: dict, after: dict, cmp: dict) -> str:
  """The comparison as markdown: norms, the carriers' table, the loud and quiet quarters."""
  lines = ["| | step | test | mean g | mean h(t-1) | mean g*h(t-1) | g < 0.1 | g > 0.9 "
           "| rank corr. (g, h) over channels |", "|---|---|---|---|---|---|---|---|---|"]
  for name, m in (("before", before), ("after", after)):
    lines.append(f"| {name} | {m.get('step')} | {100 * (m.get('test_score') or 0):.2f} "
                 f"| {m['gate_norm']:.3f} | {m['history_norm']:.3f} | {m['gated_norm']:.3f} "
                 f"| {m['share_below_0.1']:.3f} | {m['share_above_0.9']:.3f} "
                 f"| {m['gate_history_rank']:+.2f} |")
  lines += ["", f"The {len(cmp['carriers'])} channels that carried most of |g*h|^2 before "
            f"({100 * cmp['carriers_share'][0]:.0f} % of it; after: "
            f"{100 * cmp['carriers_share'][1]:.0f} %):", "",
            "| channel | share before | share after | rms g before | rms g after "
            "| rms h before | rms h after |", "|---|---|---|---|---|---|---|"]
  for c in cmp["carriers"]:
    lines.append(f"| {c['channel']} | {c['share_before']:.3f} | {c['share_after']:.3f} "
                 f"| {c['g_before']:.3f} | {c['g_after']:.3f} | {c['h_before']:.3f} "
                 f"| {c['h_after']:.3f} |")
  (lb, la), (qb, qa) = cmp["loud_gate"], cmp["quiet_gate"]
  lines += ["", f"Mean rms g on the {cmp['quarter']} of {cmp['channels']} channels with the "
            f"largest rms h(t-1) before: {lb:.3f} -> {la:.3f} (x{la / lb:.2f}); on the "
            f"{cmp['quarter']} with the smallest: {qb:.3f} -> {qa:.3f} (x{qa / qb:.2f})."]
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  """The command line (module docstring); returns 0, or 2 with one line on stderr for files
  it cannot compare."""
  parser = argparse.ArgumentParser(prog="python -m analysis.gate_channels",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--before", required=True, help="history_gate.json of the λ = 0 run")
  parser.add_argument("--after", required=True, help="history_gate.json of the G-ForgetNet run")
  parser.add_argument("--top", type=int, default=4, help="carrier channels listed (default 4)")
  parser.add_argument("--out", default=None, help="also write the markdown here")
  args = parser.parse_args(argv)
  if args.top < 1:
    parser.error("--top must be >= 1")
  try:
    before, after = load_gate(args.before), load_gate(args.after)
    text = to_markdown(before, after, compare(before, after, args.top))
  except ValueError as e:
    print(f"gate_channels: error: {e}", file=sys.stderr)
    return 2
  print(text, end="")
  if args.out:
    pathlib.Path(args.out).write_text(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
