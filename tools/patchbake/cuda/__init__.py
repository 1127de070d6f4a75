"""The CUDA code in an image's ELF objects (fatbins and cubins) and whether it runs on a
target GPU: ``patchbake image cuda-code`` and the ``cuda-code`` release gate
(docs/cuda-code.md)."""
