"""Benchmarks, not shipped with the package: ours vs dm-clrs's BaselineModel (bench.py), K seeds per job (bench_seeds.py).

Run by path from the repository root, e.g. `python benchmarks/bench.py --help`;
docs/running.md ("Speed on CPU") has the latest figures and the command that measured them.
"""
