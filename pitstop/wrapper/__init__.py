"""The process-boundary wrapper behind `pitstop run -- CMD`.

Modules here are split by when they may run. `supervise`, `options`, `rundir`, `launch`,
`signals` and `exitstatus` run before the child starts and import only what the interpreter has
already loaded plus C modules (every import there is paid on every job launch); `pump` runs while
it runs (standard library). The rest (`finish`, `classify_child`, `report`, `attachments`,
`record`) run after it ends and may use pydantic and the store. Nothing here imports
`classifiers`: the classifier is a separate process, started by its command line (`supervise.worker_argv`).
"""
