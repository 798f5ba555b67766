"""Cluster adapters: the scheduler (Slurm, or the built-in demo cluster) and remote execution."""
