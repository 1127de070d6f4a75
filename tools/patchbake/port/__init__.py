"""port: see docs/architecture.md."""
