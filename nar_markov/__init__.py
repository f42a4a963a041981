"""nar_markov: the Markov property of neural algorithmic reasoning (ICLR 2024) on dm-clrs.

Importing it changes nothing in the process (no environment variable is set): the XLA
thread pin is the training entry points' (nar_markov/training/threads.py), the quiet
start-up the command lines' (nar_markov/quiet.py).
"""

__version__ = "0.1.0"
