"""nar_markov: the Markov property of neural algorithmic reasoning (ICLR 2024) on dm-clrs."""

__version__ = "0.1.0"
