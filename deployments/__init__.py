"""deployments layer."""
