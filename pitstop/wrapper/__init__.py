"""The process-boundary wrapper behind `pitstop run -- CMD`.

Modules here are split by when they may run: `fastpath`, `rundir`, `launch`, `pump`, `signals`
and `exitstatus` use the standard library only, because they run before the child starts. The
rest (`finish`, `report`, `attachments`, `record`) run after it ends and may use pydantic and the
store. Nothing here imports `classifiers`: the classifier is injected as a callable.
"""
