"""Test support shared across test areas (fixtures registered via pytest_plugins)."""
