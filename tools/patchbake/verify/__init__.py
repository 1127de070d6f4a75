"""verify: see docs/architecture.md."""
