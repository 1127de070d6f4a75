"""Registry references (``HOST[:PORT]/repo[:tag][@sha256:...]``) and the transport policy.

A reference here always names its registry host: there is no implicit default registry,
so a push can never land somewhere the user did not type. Plain http is allowed only to
loopback hosts; everything else is https, which is why the scheme is decided here, next to
the parsing, and not by whoever builds a URL.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from ..digest import Digest
from ..errors import RegistryError, UsageError

# The distribution spec's grammar for repository path components and tags.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPO_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_HOST_RE = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::[0-9]{1,5})?$")


@dataclass(frozen=True, slots=True)
class RegistryRef:
    """One parsed reference. ``tag`` and ``digest`` may both be set (``repo:tag@sha256:..``)."""

    host: str
    repo: str
    tag: str | None = None
    digest: Digest | None = None

    @property
    def reference(self) -> str:
        """What goes after ``/manifests/``: the digest when known, else the tag."""
        if self.digest:
            return str(self.digest)
        if self.tag:
            return self.tag
        raise UsageError(f"reference {self} names neither a tag nor a digest")

    def with_digest(self, digest: Digest) -> RegistryRef:
        return RegistryRef(self.host, self.repo, None, digest)

    def __str__(self) -> str:
        s = f"{self.host}/{self.repo}"
        if self.tag:
            s += f":{self.tag}"
        if self.digest:
            s += f"@{self.digest}"
        return s


# Docker Hub, as the Docker CLI names it: references say docker.io (or index.docker.io),
# its registry API answers on DOCKER_HUB_API, and one-component names live under library/.
DOCKER_HUB_HOSTS = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
DOCKER_HUB_API = "registry-1.docker.io"
DOCKER_HUB_SERVER = "https://index.docker.io/v1/"  # the key Docker's config and helpers use


def _docker_hub(host: str, rest: str) -> tuple[str, str]:
    """``docker.io/NAME`` -> (the Hub's API host, ``library/NAME`` for a one-part name)."""
    if host.lower() not in DOCKER_HUB_HOSTS:
        return host, rest
    # a tag never holds "/", so a one-part name is one with no "/" before any digest
    return DOCKER_HUB_API, rest if "/" in rest.split("@", 1)[0] else f"library/{rest}"


def _looks_like_host(part: str) -> bool:
    return "." in part or ":" in part or part == "localhost" or part.startswith("[")


DEFAULT_REGISTRY_ENV = "PATCHBAKE_DEFAULT_REGISTRY"


def parse_ref(text: str, *, need_tag_or_digest: bool = True,
              default_host: str | None = None) -> RegistryRef:
    """Parse ``HOST[:PORT]/repo[:tag][@sha256:hex]``; raise UsageError with the rule broken.

    A short name (``org/app@sha256:..``) is accepted only when ``default_host`` is given
    (pulls take it from ``PATCHBAKE_DEFAULT_REGISTRY``); a one-component short name gets
    the ``library/`` prefix, as engines do. Pushes never pass a default.
    """
    raw = text.strip()
    for prefix in ("docker://", "oci://"):
        raw = raw.removeprefix(prefix)
    host, _, rest = raw.partition("/")
    if not rest or not _looks_like_host(host):
        if not default_host:
            raise UsageError(
                f"registry reference '{text}' names no registry host",
                hint="write it as HOST[:PORT]/repo:tag, e.g. 127.0.0.1:5000/vllm-sm89:0.25.1"
                     f" (for pulls, {DEFAULT_REGISTRY_ENV}=HOST says what short names mean)",
            )
        host, rest = default_host, raw if "/" in raw.split("@")[0].split(":")[0] \
            else f"library/{raw}"
    if not _HOST_RE.match(host):
        raise UsageError(f"'{host}' in registry reference '{text}' is not a host[:port]")
    host, rest = _docker_hub(host, rest)
    digest = None
    if "@" in rest:
        rest, digest_text = rest.split("@", 1)
        digest = Digest.parse(digest_text, f"the digest in registry reference '{text}'",
                              UsageError)
    tag = None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, tag = rest.rsplit(":", 1)
        if not TAG_RE.match(tag):
            raise UsageError(f"'{tag}' in '{text}' is not a valid tag ([A-Za-z0-9_][A-Za-z0-9_.-]*)")
    if not REPO_RE.match(rest) or len(rest) > 255:
        raise UsageError(
            f"'{rest}' in '{text}' is not a valid repository name",
            hint="lowercase letters, digits and . _ - separators, path components joined by /",
        )
    if need_tag_or_digest and not tag and not digest:
        raise UsageError(f"registry reference '{text}' names neither a tag nor a digest",
                         hint="add :TAG or @sha256:DIGEST")
    return RegistryRef(host.lower(), rest, tag, digest)


def _bare_host(hostport: str) -> str:
    if hostport.startswith("["):
        return hostport[1:hostport.index("]")]
    return hostport.rsplit(":", 1)[0] if hostport.count(":") == 1 else hostport


def is_loopback(hostport: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1 (with or without a port)."""
    return is_loopback_host(_bare_host(hostport).lower())


def base_url(host_or_url: str, *, insecure_loopback_http: bool = True) -> str:
    """The scheme+host a client talks to, after applying the transport policy.

    Loopback hosts get http (the local test registry has no certificate) unless disabled
    or the caller wrote ``https://``; any other host gets https, and an explicit
    ``http://`` to a non-loopback host is refused: credentials and manifests would travel
    in the clear and could be rewritten on the way.
    """
    if "://" in host_or_url:
        parts = urlsplit(host_or_url)
        scheme, host = parts.scheme.lower(), parts.netloc
    else:
        scheme, host = "", host_or_url.rstrip("/")
    if not host or not _HOST_RE.match(host):
        raise UsageError(f"'{host_or_url}' is not a registry host")
    check_url_allowed(f"{scheme or 'https'}://{host}", insecure_loopback_http=True)
    if scheme == "http" and not insecure_loopback_http:
        raise RegistryError(f"plain http to {host} is disabled", hint="use https://")
    if scheme:
        return f"{scheme}://{host}"
    return f"http://{host}" if is_loopback(host) and insecure_loopback_http else f"https://{host}"


_URL_NETLOC_RE = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::[0-9]{1,5})?$")


def _url_host(url: str) -> tuple[str, str]:
    """(scheme, host) of ``url``, which is where the connection goes (the HTTP stack
    connects to this parse's host and port, and to nothing else). Refused: what parsers
    could read differently, or a person misread: user info (``http://[::1]@host/``),
    backslashes, whitespace, control characters, a host[:port] that is not plain."""
    if any(c in url for c in "\\ \t\r\n") or any(ord(c) < 32 or ord(c) == 127 for c in url):
        raise RegistryError(f"refusing URL with whitespace, control characters or backslashes: "
                            f"{url!r:.120}")
    try:
        parts = urlsplit(url)
        hostname = parts.hostname or ""
        ours = parts.netloc
        _ = parts.port  # a port that is not a number is a ValueError here
    except ValueError as exc:
        raise RegistryError(f"refusing malformed URL {url!r:.120}: {exc}") from None
    if "@" in ours or parts.username is not None:
        raise RegistryError(f"refusing URL with user info (credentials or '@') in it: "
                            f"{parts.scheme}://…@{hostname}",
                            hint="credentials come from PATCHBAKE_REGISTRY_USER/PASSWORD or "
                                 "docker login, never from a URL")
    if ours and not _URL_NETLOC_RE.match(ours):
        raise RegistryError(f"refusing URL whose host is not a plain host[:port]: {url!r:.120}")
    return parts.scheme.lower(), hostname.lower()


def resolve_location(base: str, location: str, what: str) -> str:
    """A ``Location`` header against the URL that answered it; one the URL parser refuses
    (``http://[::1]@host/``: a bracketed "host" that is none) is refused here, as the
    transport policy refuses what it cannot read one way only."""
    try:
        return urljoin(base, location)
    except ValueError as exc:
        raise RegistryError(f"refusing {what} to a malformed URL {location!r:.120}: "
                            f"{exc}") from None


def check_url_allowed(url: str, *, insecure_loopback_http: bool = True) -> None:
    """Refuse any URL (registry, token realm, redirect) that would use plain http off
    loopback; applied to every hop, on the host the connection really goes to."""
    scheme, host = _url_host(url)
    if not host:
        raise RegistryError(f"refusing URL without a host: {url!r:.120}")
    if scheme == "https":
        return
    if scheme == "http" and insecure_loopback_http and is_loopback_host(host):
        return
    if scheme == "http":
        raise RegistryError(
            f"refusing plain http to {host}: only loopback registries "
            "(127.0.0.0/8, ::1, localhost) may be reached without TLS",
            hint="serve the registry over https",
        )
    raise RegistryError(f"refusing URL with scheme '{scheme}': {url!r:.120}")


def is_loopback_host(host: str) -> bool:
    """localhost or a loopback address: the one test of 'loopback' for URLs."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
