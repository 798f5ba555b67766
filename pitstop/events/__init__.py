"""Trigger events: Slurm hook environments -> `JobEnded` / `NodeAlarm` -> disk spool -> Prefect.

Core package: no prefect import anywhere here (the hooks must start in a fraction of a second).
"""
