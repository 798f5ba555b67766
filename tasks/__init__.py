"""tasks layer."""
