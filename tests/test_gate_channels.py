"""analysis.gate_channels: the history gate before and after the penalty, channel by channel,
on made-up probe files."""

import json
import pathlib

import pytest

from analysis import gate_channels


def _probe(path, rms_g, rms_h, step):
  gh2 = [(g * h) ** 2 for g, h in zip(rms_g, rms_h)]
  share = [v / sum(gh2) for v in gh2]
  gate = {"gate_norm": sum(rms_g) / len(rms_g), "history_norm": 1.0, "gated_norm": 0.5,
          "share_below_0.1": 0.0, "share_above_0.9": 0.5, "gate_history_rank": 0.0,
          "channels": {"share": share, "rms_g": rms_g, "rms_h": rms_h}}
  path.write_text(json.dumps({"run_dir": str(path.parent), "step": step,
                              "scores": [{"source": "test", "score": 0.75,
                                          "history_gate": gate}]}))
  return str(path)


def test_a_penalty_that_shuts_the_loud_channels_reads_so(tmp_path, capsys):
  h = [4.0, 3.0, 0.2, 0.2, 0.1, 0.1, 0.1, 0.1]  # channels 0-1 carry the history
  before = _probe(tmp_path / "b.json", [0.95] * 8, h, 6000)
  after = _probe(tmp_path / "a.json", [0.05, 0.1] + [0.9] * 6, h, 9900)
  out = tmp_path / "cmp.md"
  assert gate_channels.main(["--before", before, "--after", after, "--top", "2",
                             "--out", str(out)]) == 0
  text = capsys.readouterr().out
  assert text == out.read_text()
  cmp = gate_channels.compare(gate_channels.load_gate(before), gate_channels.load_gate(after), 2)
  assert [c["channel"] for c in cmp["carriers"]] == [0, 1]
  assert cmp["carriers"][0]["g_after"] == pytest.approx(0.05)
  assert cmp["loud_gate"] == pytest.approx((0.95, 0.075))  # the quarter: channels 0 and 1
  assert cmp["quiet_gate"] == pytest.approx((0.95, 0.9))
  assert "| 0 | " in text and "(x0.08)" in text and "(x0.95)" in text


def test_files_it_cannot_compare_are_one_line(tmp_path, capsys):
  good = _probe(tmp_path / "g.json", [0.5] * 8, [1.0] * 8, 1)
  small = _probe(tmp_path / "s.json", [0.5] * 4, [1.0] * 4, 1)
  old = tmp_path / "old.json"
  data = json.loads(pathlib.Path(good).read_text())
  del data["scores"][0]["history_gate"]["channels"]
  old.write_text(json.dumps(data))
  for other, why in ((small, "8 and 4 channels"), (str(old), "run evaluate --history-gate again"),
                     (str(tmp_path / "none.json"), "not a readable")):
    assert gate_channels.main(["--before", good, "--after", other]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gate_channels: error: ") and why in err and err.count("\n") == 1

