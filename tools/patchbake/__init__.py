"""patchbake: canonical patch -> pinned vLLM sources -> reproducible images -> signed evidence."""

__version__ = "0.1.0"
