"""Sweep launcher (sweep.py), its --status logic (status.py) and a one-machine Slurm (local_slurm.sh)."""
