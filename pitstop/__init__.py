"""Pitstop: diagnose, remediate and report failed GPU training jobs and unhealthy nodes.

The core package holds what every layer shares: typed models, settings, the store and the
cluster adapters. It imports nothing from `classifiers`, `tasks`, `flows` or `deployments`;
`pitstop.cli` is the composition root that wires those layers together.
"""

__version__ = "0.1.0"
