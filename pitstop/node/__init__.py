"""Node-local health adapters: NVML, DCGM, InfiniBand, kernel-log Xids and disk space.

Each adapter reads one source behind a small function that takes its dependency (the NVML
module, a sysfs root, a command path) as a parameter, and returns a typed `CheckResult`. Pure
parsers and rule tables are separate from the code that runs tools, so they are testable on any
machine and the same code runs unchanged on a real GPU node.
"""
