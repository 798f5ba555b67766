"""classifiers layer."""
