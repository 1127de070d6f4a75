"""patchset stage: canonical patch, FILES.txt, the lost-line guard, strict apply, series.

The package imports none of its modules: the standard-library-only ones (diffparse,
filelist, apply, strict, guard, sourcerec) stay importable without the package's
dependencies, which ``tools/check_patch_files.py`` relies on. Import from the module::

    from patchbake.patchset.patched import patched_tree, PatchedTree
    tree = patched_tree(lineage, store)   # root, files, deleted, patch_sha256, ...
"""
