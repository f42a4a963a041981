"""nar_markov: the Markov property of neural algorithmic reasoning (ICLR 2024) on dm-clrs."""

import os as _os

# dm-clrs imports TensorFlow (for its dataset code), which prints CUDA-probe and
# oneDNN banners on every start; they say nothing about our runs. This hides TF's
# later INFO/WARNING logs; TF >= 2.20 writes the start-up ones before reading it,
# which the command-line entry points drop with nar_markov/quiet.py.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
