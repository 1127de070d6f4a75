"""evidence stage."""
