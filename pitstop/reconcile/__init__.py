"""Reconciliation: routed events and unfinished incidents checked against what actually ran.

model: the inputs and the plan; subjects: what a run is about and which incident answers it;
plan: the pure comparison; liveness: the incident lock probe. The Prefect adapter is
deployments/reconcile.py; `pitstop reconcile` and the loop in `pitstop up` call it.
"""
