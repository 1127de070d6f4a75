"""patchset stage."""
