"""The sweep launcher (sweep.py), its --status (status.py), a one-machine Slurm (local_slurm.sh)."""
