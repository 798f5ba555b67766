"""Command line: the composition root that wires core, classifiers, tasks and flows together."""
