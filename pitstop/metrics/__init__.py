"""Prometheus metrics computed at scrape time from the store, the spool, the cluster and Prefect.

Nothing is counted in memory: every process records what happened in the store, and a scrape
aggregates it, so metrics survive restarts and need no shared registry. See catalog.py for the
list, collector.py for the time-boxing, exporter.py for `pitstop up` / `pitstop metrics`.
"""
