"""nar_markov: the Markov property of neural algorithmic reasoning (ICLR 2024) on dm-clrs."""

import os as _os

# dm-clrs imports TensorFlow (for its dataset code), which prints CUDA-probe and
# oneDNN banners on every start; they say nothing about our runs.
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
