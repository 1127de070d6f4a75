"""Releases: channels and fail-closed gates, release manifests, the signed VSA, the
hash-chained ledger, promotion by digest with attached statements, offline verify and the
HTML report (docs/releases.md)."""
