"""The trust policy: which public keys may sign which evidence.

A committed YAML file (``signing.trust_policy`` in pipeline.yaml, by default
``manifests/trust-policy.yaml``)::

    version: 1
    keys:
      release-2026:
        keyid: <sha256 of the raw public key>
        public_key: |
          -----BEGIN PUBLIC KEY-----
          ...
        owner: who holds the private key
        allow:
          - predicate_type: https://in-toto.io/attestation/test-result/v0.1
            suites: ["dsv4-topk-*"]      # fnmatch patterns

Version 2 adds ``roles`` to a key (version 1 files still load, their keys having no role)::

        roles: [release]                 # may sign release VSAs and ledger entries
        roles: [approver]                # may sign approvals ...
        channels: ["sm89-stable"]        # ... for these channels (fnmatch; default all)

``allow`` (evidence grants) is optional in version 2; a key with neither grants nor roles
is an error. ``separation_of_duties`` (top level, default true) refuses a policy in which
one key, or one named ``owner``, holds both ``release`` and ``approver``: whoever signs a
release never approves it. Owners are compared normalised (``person()``: surrounding
blanks stripped, case folded), so "Alice" and "alice " are one person wherever people are
counted. A keyid that does not match its PEM, or two entries with one keyid, is a policy
error, never silently recomputed or merged. Verification is fail-closed: a missing or
invalid policy trusts nobody.
"""

from __future__ import annotations

import fnmatch
from functools import partial
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..errors import ConfigError, EvidenceError, shown
from ..config.schema import Field, Schema, sha256_check, suggest, validate
from ..config.yamlread import parse_text
from ..fsutil import read_input
from ..errors import refuse_evidence
from .keys import keyid_of, parse_public

VERSIONS = (1, 2)
ROLES = ("release", "approver")
POLICY_SCHEMA = Schema({
    "version": Field(int, required=True,
                     check=lambda v: None if v in VERSIONS else "must be 1 or 2"),
    "keys": Field(dict, required=True, help="name -> key entry"),
    "separation_of_duties": Field(bool, default=True,
                                  help="version 2: no key or owner both releases and approves"),
})
KEY_SCHEMA = Schema({
    "keyid": Field(str, required=True, check=sha256_check),
    "public_key": Field(str, required=True, help="the PEM public key"),
    "owner": Field(str, default=""),
    "allow": Field(list, default=None, help="list of {predicate_type, suites}"),
    "roles": Field(list, default=[], help="version 2: release and/or approver"),
    "channels": Field(list, default=["*"], help="version 2: channels an approver may approve"),
})
ALLOW_SCHEMA = Schema({
    "predicate_type": Field(str, required=True),
    "suites": Field(list, default=["*"], items=str),
})


@dataclass(frozen=True)
class Grant:
    predicate_type: str
    suites: tuple[str, ...]

    def covers(self, predicate_type: str, suite: str) -> bool:
        return predicate_type == self.predicate_type and any(
            fnmatch.fnmatchcase(suite, pat) for pat in self.suites)


def person(owner: str) -> str:
    """An owner as compared wherever distinct people are counted ("" for none)."""
    return owner.strip().casefold()


@dataclass(frozen=True)
class TrustedKey:
    name: str
    keyid: str
    key: Ed25519PublicKey
    owner: str
    grants: tuple[Grant, ...]
    roles: tuple[str, ...] = ()
    channels: tuple[str, ...] = ("*",)

    @property
    def person(self) -> str:
        """The normalised owner ("" when the key names none: it then counts by key)."""
        return person(self.owner)

    def same_holder(self, other: TrustedKey) -> bool:
        """One key, or two keys of one named owner (normalised)."""
        return self.keyid == other.keyid or bool(self.person and self.person == other.person)

    def approves(self, channel: str) -> bool:
        return "approver" in self.roles and any(
            fnmatch.fnmatchcase(channel, pat) for pat in self.channels)


@dataclass(frozen=True)
class Policy:
    path: Path
    keys: dict[str, TrustedKey]  # by keyid
    version: int = 1
    separation_of_duties: bool = True

    def with_role(self, role: str) -> dict[str, Ed25519PublicKey]:
        """The public keys that hold ``role`` (what a VSA, ledger entry or approval may
        be signed by); empty when none does, so verification fails closed."""
        return {k: t.key for k, t in self.keys.items() if role in t.roles}

    def public_keys(self) -> dict[str, Ed25519PublicKey]:
        return {k: t.key for k, t in self.keys.items()}

    def check_allowed(self, keyid: str, predicate_type: str, suite: str, where: str) -> TrustedKey:
        trusted = self.keys[keyid]
        if not any(g.covers(predicate_type, suite) for g in trusted.grants):
            refuse_evidence("not-allowed", f"{where}: key '{trusted.name}' ({keyid[:16]}) is trusted but "
                 f"not allowed to sign suite '{suite}' ({predicate_type})",
                 hint=f"extend its 'allow' list in {self.path.name} if that is intended")
        return trusted


def parse(data: Any, path: Path) -> Policy:
    src = path.name
    top = validate(data, POLICY_SCHEMA, "", src)
    keys: dict[str, TrustedKey] = {}
    for name, raw in top["keys"].items():
        where = f"keys.{name}"
        entry = validate(raw, KEY_SCHEMA, where, src)
        try:
            pub = parse_public(entry["public_key"], f"{src}: {where}.public_key")
        except EvidenceError as exc:  # a bad PEM in the policy is a config problem
            raise ConfigError(exc.message) from None
        if keyid_of(pub) != entry["keyid"]:
            raise ConfigError(f"{src}: '{where}.keyid' is {entry['keyid'][:16]}..., but the "
                              f"public key's id is {keyid_of(pub)[:16]}...")
        if entry["keyid"] in keys:
            raise ConfigError(f"{src}: '{where}' has keyid {entry['keyid'][:16]}..., which "
                              f"'keys.{keys[entry['keyid']].name}' already has: one key, one "
                              "entry (its roles and grants would depend on which is read)")
        roles = _roles(entry, top["version"], where, src)
        grants = []
        for i, g in enumerate(entry["allow"] or []):
            a = validate(g, ALLOW_SCHEMA, f"{where}.allow[{i}]", src)
            if not all(isinstance(s, str) for s in a["suites"]):
                raise ConfigError(f"{src}: '{where}.allow[{i}].suites' must list strings")
            grants.append(Grant(a["predicate_type"], tuple(a["suites"])))
        keys[entry["keyid"]] = TrustedKey(str(name), entry["keyid"], pub, entry["owner"],
                                          tuple(grants), roles, tuple(entry["channels"]))
    if top["separation_of_duties"]:
        _check_separation(keys.values(), src)
    return Policy(path, keys, top["version"], top["separation_of_duties"])


def _check_separation(keys: Any, src: str) -> None:
    """Refused before any command uses the policy: a release manager approving their own
    release (one key, or two keys of one named owner)."""
    releasers = [k for k in keys if "release" in k.roles]
    for a in (k for k in keys if "approver" in k.roles):
        both = next((r for r in releasers if r.same_holder(a)), None)
        if both is not None:
            who = (f"key '{a.name}' holds" if both.keyid == a.keyid else
                   f"owner {shown(a.owner)} holds '{both.name}' (release) and '{a.name}'")
            raise ConfigError(f"{src}: {who} both the 'release' and the 'approver' role: "
                              "a release manager would approve their own release",
                              hint="give approvals to another key and person, or set "
                                   "`separation_of_duties: false` deliberately")


def _roles(entry: dict[str, Any], version: int, where: str, src: str) -> tuple[str, ...]:
    if version == 1:
        if entry["roles"] or entry["channels"] != ["*"]:
            raise ConfigError(f"{src}: '{where}.roles' and '.channels' need 'version: 2'")
        if entry["allow"] is None:
            raise ConfigError(f"{src}: missing required key '{where}.allow' "
                              "(list of {predicate_type, suites})")
        return ()
    for r in entry["roles"]:
        if r not in ROLES:
            raise ConfigError(f"{src}: '{where}.roles' names {shown(r)}, not one of "
                              f"{', '.join(ROLES)}{suggest(str(r)[:80], list(ROLES))}")
    if not all(isinstance(c, str) for c in entry["channels"]):
        raise ConfigError(f"{src}: '{where}.channels' must list strings")
    if entry["allow"] is None and not entry["roles"]:
        raise ConfigError(f"{src}: '{where}' has neither 'allow' nor 'roles': it can sign "
                          "nothing")
    return tuple(entry["roles"])


def load(path: Path) -> Policy:
    data = read_input(path, "trust policy", partial(EvidenceError, reason="policy"),
                      missing=lambda m: EvidenceError(
                          f"{m}: nothing can be verified", reason="policy",
                          hint="commit a trust policy listing the public keys that sign evidence"))

    return parse(parse_text(data, path.name), path)


def render_entry(name: str, keyid: str, pem: str, owner: str, suites: list[str],
                 predicate_type: str) -> str:
    """One key's entry as YAML text (PEM as a literal block), ready to paste under keys:."""
    pem_lines = "".join(f"      {line}\n" for line in pem.strip().splitlines())
    suite_list = ", ".join(f'"{s}"' for s in suites)
    return (f"  {name}:\n    keyid: \"{keyid}\"\n    owner: \"{owner}\"\n"
            f"    public_key: |\n{pem_lines}    allow:\n"
            f"      - predicate_type: {predicate_type}\n        suites: [{suite_list}]\n")
