"""test_fastnet's comparison of the fast net with the reference net, on every CLRS-30
algorithm, for the processors with a fast path after the first (test_fastnet.py has
the first, Triplet-GMPNN): here the paper's Eq. 2 net without the update gate,
Triplet-MPNN.  A file of its own so that pytest-xdist's `--dist loadfile` can run it
on one worker while test_fastnet.py runs on the other."""

import pytest

from nar_markov.config import clrs30

from nar_markov.config import netconfig

import test_fastnet


@pytest.mark.usefixtures("quick_compile")
@pytest.mark.parametrize("processor", netconfig.FAST_PROCESSORS[1:])
@pytest.mark.parametrize("algorithm", test_fastnet.ALGORITHMS)
def test_fast_equals_reference(algorithm, processor):
  test_fastnet.check_fast_equals_reference(algorithm, processor)


def _parametrized(test) -> dict:
  return {m.args[0]: tuple(m.args[1]) for m in test.pytestmark if m.name == "parametrize"}


def test_the_two_files_compare_every_fast_processor_on_every_algorithm():
  """Between them, test_fastnet.py and this file compare every processor of
  FAST_PROCESSORS, each once, on every CLRS-30 algorithm."""
  halves = [_parametrized(t) for t in (test_fastnet.test_fast_equals_reference,
                                        test_fast_equals_reference)]
  assert all(h["algorithm"] == tuple(clrs30.ALGORITHMS) for h in halves)
  processors = [p for h in halves for p in h["processor"]]
  assert sorted(processors) == sorted(netconfig.FAST_PROCESSORS)
