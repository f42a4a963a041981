"""The data's command line: describe a CLRS-30 split, or fill the val/test cache.

  python -m nar_markov.data.pipeline --algorithm bfs --split test [--cache-dir DIR]
  python -m nar_markov.data.pipeline --all      # val+test of all 30 algorithms

The data themselves: nar_markov.data.train_stream, .validation_pool, .splits (docs/formats.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Optional, Sequence

if __name__ == "__main__":  # before clrs imports tensorflow: no start-up banners
  from nar_markov import quiet  # pylint: disable=g-import-not-at-top
  quiet.setup()

import clrs

from nar_markov import quiet
from nar_markov.config import clrs30
from nar_markov.data import batching
from nar_markov.data import split_cache
from nar_markov.data import splits
from nar_markov.data import train_stream


def _describe(feedback: clrs.Feedback) -> str:
  lengths = feedback.features.lengths
  return (f"{batching.nb_samples_of(feedback)} samples of "
          f"{batching.nb_nodes_of(feedback)} nodes, "
          f"trajectory lengths min {int(lengths.min())} max {int(lengths.max())}"
          f" (hint time axis {batching.hint_time(feedback)})")


def main(argv: Optional[Sequence[str]] = None) -> int:
  """The command line (module docstring); returns the exit status.

  --all fills the val and test cache of every CLRS-30 algorithm; --split train prints one
  batch of each train length of a fresh `train_stream.TrainStream`; otherwise the split is
  read from the cache (or drawn and cached) and described.

  Returns:
    0, or 2 for an unknown algorithm (argparse exits with 2 for a usage error).
  """
  parser = argparse.ArgumentParser(
      prog="python -m nar_markov.data.pipeline",
      description="Inspect CLRS-30 splits / fill the val+test cache.")
  parser.add_argument("--algorithm", help="one of the 30 CLRS-30 algorithms")
  parser.add_argument("--split", choices=splits.SPLITS, default="test")
  parser.add_argument("--all", action="store_true",
                      help="fill the cache (val+test) for all 30 algorithms")
  parser.add_argument("--cache-dir", default=None,
                      help="default: $NAR_MARKOV_CACHE, gin, ~/.cache/nar_markov")
  parser.add_argument("--seed", type=int, default=0, help="train split only")
  quiet.add_flag(parser)
  args = parser.parse_args(argv)

  if args.all:
    print(f"cache: {split_cache.resolve_cache_dir(args.cache_dir)}", flush=True)
    for i, algorithm in enumerate(clrs30.ALGORITHMS):
      parts = []
      t0 = time.time()
      for split in ("val", "test"):
        t = time.time()
        feedback, how = splits.load_raw_split(algorithm, split, args.cache_dir)
        size_mb = splits.cache_path(algorithm, split, args.cache_dir).stat().st_size / 1e6
        parts.append(f"{split} {batching.nb_samples_of(feedback)}x"
                     f"{batching.nb_nodes_of(feedback)}"
                     f" {how} {time.time() - t:.1f}s {size_mb:.1f}MB")
        del feedback
      print(f"[{i + 1:2d}/{len(clrs30.ALGORITHMS)}] {algorithm}: " + ", ".join(parts)
            + f" ({time.time() - t0:.1f}s)", flush=True)
    return 0

  if args.algorithm is None:
    parser.error("--algorithm or --all is required")
  try:
    clrs30.check_algorithm(args.algorithm)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2

  if args.split == "train":
    stream = train_stream.TrainStream(args.algorithm, seed=args.seed)
    print(f"{args.algorithm} train: on-the-fly sampler (seed {args.seed}), "
          f"one batch of {stream.batch_size} per train length:")
    for nb_nodes in stream.lengths:
      feedback = next(stream)
      print(f"  {nb_nodes:3d} nodes: {_describe(feedback)}")
    return 0

  t = time.time()
  feedback, how = splits.load_raw_split(args.algorithm, args.split, args.cache_dir)
  seconds = time.time() - t
  path = splits.cache_path(args.algorithm, args.split, args.cache_dir)
  print(f"{args.algorithm} {args.split}: {_describe(feedback)}")
  print(f"  {how} in {seconds:.2f}s; cache {path} "
        f"({path.stat().st_size / 1e6:.1f} MB)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
