"""evidence stage: in-toto statements about suite results, DSSE-signed with Ed25519,
checked against a committed trust policy and bound to one image manifest digest.

Public API (what the release gates use)::

    from patchbake.evidence import policy, records
    pol = policy.load(root / "manifests/trust-policy.yaml")
    v = records.verify_file(path, "sha256:...", pol, suite="dsv4-topk-gpu")
    v.counts_as_evidence  # PASSED, every probe holding, and shown to fail without the patch
    records.verify_suites(evidence_dir, digest, pol, ["dsv4-topk-gpu", ...])
"""
