"""pip's network settings (netconfig) and the one trust both clients take from them
(netpolicy.http_session): precedence, the sessions' verify/cert/proxies, trusted hosts,
and a certificate failure that is not retried and says what to set."""

from __future__ import annotations

import io
import os
import re
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import requests
import urllib3
from patchbake import netconfig, netpolicy
from patchbake.errors import ConfigError, RegistryError, TrustError
from patchbake.oci.registry_http import Transport, registry_session
from patchbake.sources import http
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict


@pytest.fixture
def pipconf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """No PIP_* variable, no CA variable, no proxy; pip's files are temp files."""
    for var in list(os.environ):
        if var.startswith("PIP_") or var in netconfig.CA_ENV or var.lower().endswith("_proxy"):
            monkeypatch.delenv(var)
    files = {k: tmp_path / f"{k}.conf" for k in ("global", "user", "site", "env")}
    monkeypatch.setattr(netconfig, "file_locations", lambda: (
        [str(files["global"])], [str(files["user"])], [str(files["site"])]))
    for name in ("ca.pem", "client.pem"):
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\n")
    return files


FULL = """[global]
index-url = https://primary.test/simple
extra-index-url = file:///opt/a/simple
    https://extra.test/simple
cert = {ca}
client-cert = {client}
trusted-host = mirror.test other.test:8443
proxy = http://proxy.test:3128
default-timeout = 42
"""


def test_every_setting_from_the_file_pip_config_file_names(
        pipconf: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = pipconf["env"]
    env.write_text(FULL.format(ca=tmp_path / "ca.pem", client=tmp_path / "client.pem"))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(env))
    net = netconfig.read()
    assert net.index_url == "https://primary.test/simple"
    assert net.extra_index_urls == ("file:///opt/a/simple", "https://extra.test/simple")
    assert net.cert == net.verify == str(tmp_path / "ca.pem")
    assert net.client_cert == str(tmp_path / "client.pem")
    assert net.trusted_hosts == ("mirror.test", "other.test:8443")
    assert net.proxy == "http://proxy.test:3128" and net.timeout == 42.0
    assert net.origin("cert") == f"{env} [global] cert" == net.origin("verify")
    assert net.origin("timeout") == f"{env} [global] default-timeout"
    assert net.trust() == f"{tmp_path / 'ca.pem'} (from {env} [global] cert)"


def test_environment_wins_over_every_file(pipconf: dict[str, Path], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pipconf["env"].write_text(FULL.format(ca="/nowhere/file.pem", client="/nowhere/c.pem"))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(pipconf["env"]))
    monkeypatch.setenv("PIP_CERT", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.test/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://x1.test/simple https://x2.test/simple")
    monkeypatch.setenv("PIP_TRUSTED_HOST", "only.test")
    net = netconfig.read()
    assert (net.verify, net.origin("verify")) == (str(tmp_path / "ca.pem"), "PIP_CERT")
    assert (net.index_url, net.origin("index-url")) == ("https://env.test/simple",
                                                         "PIP_INDEX_URL")
    assert net.extra_index_urls == ("https://x1.test/simple", "https://x2.test/simple")
    assert net.trusted_hosts == ("only.test",)
    assert net.client_cert == "/nowhere/c.pem"  # not overridden: the file's value stands


def test_file_order_sections_and_the_files_pip_skips(pipconf: dict[str, Path],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pipconf["global"].write_text("[global]\ncert = /g.pem\ntrusted-host = g.test\n"
                                 "[install]\nproxy = http://g.test:1\n")
    pipconf["user"].write_text("[global]\ncert = /u.pem\nproxy = http://u.test:1\n")
    pipconf["site"].write_text("[download]\ntrusted_host = s.test\n[global]\ncert =\n")
    net = netconfig.read()
    assert net.cert == "/u.pem"  # user over global; site's empty value is ignored
    assert net.trusted_hosts == ("s.test",)  # [download] over [global]; _ reads as -
    assert net.proxy == "http://g.test:1"  # [install] over [global], whatever the file
    pipconf["env"].write_text("[global]\nclient-cert = /e.pem\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(pipconf["env"]))
    net = netconfig.read()
    assert net.cert == "/g.pem" and net.client_cert == "/e.pem"  # the user file is skipped
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    assert netconfig.read() == netconfig.NetworkSettings()


def test_ca_variables_win_over_pips_cert(pipconf: dict[str, Path], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CERT", "/pip.pem")
    monkeypatch.setenv("CURL_CA_BUNDLE", "/curl.pem")
    assert (netconfig.read().verify, netconfig.read().origin("verify")) == (
        "/curl.pem", "CURL_CA_BUNDLE")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/requests.pem")
    assert netconfig.read().verify == "/requests.pem"
    monkeypatch.delenv("REQUESTS_CA_BUNDLE")
    monkeypatch.delenv("CURL_CA_BUNDLE")
    assert netconfig.read().verify == "/pip.pem"
    monkeypatch.delenv("PIP_CERT")
    assert netconfig.read().verify is True and netconfig.read().trust() == "certifi's bundle"


def test_the_reader_agrees_with_pips_own_configuration(
        pipconf: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from pip._internal import configuration as pipcfg

    pipconf["global"].write_text("[global]\ncert = /g.pem\nindex-url = https://g.test/s\n")
    pipconf["user"].write_text("[global]\ncert = /u.pem\n[install]\ntrusted-host = i.test\n")
    pipconf["env"].write_text("[global]\nproxy = http://e.test:1\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(pipconf["env"]))
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.test/s")
    # keyed by the kinds' values, which pip's kinds equal whether they are plain strings
    # (pip < 26) or a str Enum (pip 26)
    monkeypatch.setattr(pipcfg, "get_configuration_files", lambda: {
        "global": [str(pipconf["global"])], "user": [str(pipconf["user"])],
        "site": [str(pipconf["site"])]})
    conf = pipcfg.Configuration(isolated=False)
    conf.load()
    # pip < 26 lists merged "section.key" pairs; pip 26 lists each file's own, in order
    pairs = [kv for k, v in conf.items()
             for kv in (v.items() if isinstance(v, dict) else [(k, v)])]
    theirs: dict[str, str] = {}
    for section in (*netconfig.SECTIONS, ":env:"):  # pip's ConfigOptionParser's order
        theirs.update({k.split(".", 1)[1]: v for k, v in pairs
                       if k.split(".", 1)[0] == section and v
                       and k.split(".", 1)[1] in netconfig.OPTIONS})
    assert {k: v for k, (v, _) in netconfig.raw_values().items()} == theirs
    assert theirs == {"cert": "/g.pem", "index-url": "https://env.test/s",
                      "proxy": "http://e.test:1"}  # the user file is skipped by both


def test_trusted_hosts_match_as_pips_do() -> None:
    net = netconfig.NetworkSettings(trusted_hosts=("mirror.test", "other.test:8443", "[::1]"))
    assert net.is_trusted_host("https://mirror.test/simple/")
    assert net.is_trusted_host("http://MIRROR.test:8080/x")
    assert net.is_trusted_host("https://other.test:8443/x")
    assert not net.is_trusted_host("https://other.test/x")
    assert net.is_trusted_host("https://[::1]:5000/v2/")
    assert not net.is_trusted_host("https://mirror.test.evil/x")


def test_a_tls_file_that_does_not_exist_is_a_config_error(
        pipconf: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CLIENT_CERT", "/nowhere/client.pem")
    with pytest.raises(ConfigError, match=r"TLS file /nowhere/client.pem \(from "
                                          r"PIP_CLIENT_CERT\) does not exist") as err:
        http.new_session()
    assert err.value.exit_code == 3
    monkeypatch.setenv("PIP_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match="timeout 'soon' .from PIP_TIMEOUT. is not a number"):
        netconfig.read()


# -- the sessions --------------------------------------------------------------------
class Recorder(BaseAdapter):
    """Records what requests hands the adapter; answers 200, or raises ``fail``."""

    def __init__(self, fail: Exception | None = None) -> None:
        super().__init__()
        self.fail = fail
        self.sent: list[dict[str, Any]] = []

    def send(self, request: requests.PreparedRequest, stream: bool = False,
             timeout: float | tuple[float, float] | tuple[float, None] | None = None,
             verify: bool | str = True,
             cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
             proxies: Mapping[str, str] | None = None) -> requests.Response:
        self.sent.append({"url": request.url, "verify": verify, "cert": cert,
                          "proxies": dict(proxies or {})})
        if self.fail is not None:
            raise self.fail
        r = requests.Response()
        r.status_code, r.url, r.request, r.reason = 200, str(request.url), request, "OK"
        r.headers = CaseInsensitiveDict({"Content-Length": "2"})
        r.raw = urllib3.HTTPResponse(body=io.BytesIO(b"ok"), preload_content=False)
        return r

    def close(self) -> None:
        pass


def test_both_clients_carry_the_same_trust(pipconf: dict[str, Path], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pipconf["env"].write_text(f"[global]\ncert = {tmp_path / 'ca.pem'}\n"
                              f"client-cert = {tmp_path / 'client.pem'}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(pipconf["env"]))
    sources, registry = http.new_session(), registry_session()
    assert sources.verify == registry.verify == str(tmp_path / "ca.pem")
    assert sources.cert == registry.cert == str(tmp_path / "client.pem")
    assert isinstance(sources, netpolicy.Session) and isinstance(registry, netpolicy.Session)
    assert sources.network == registry.network == netconfig.read()
    # and requests hands exactly that to the connection
    fake = Recorder()
    t = Transport("https://registry.test", adapter=fake)
    t.request("GET", "/v2/")
    assert fake.sent[0]["verify"] == str(tmp_path / "ca.pem")
    assert fake.sent[0]["cert"] == str(tmp_path / "client.pem")


def test_trusted_hosts_and_only_they_skip_verification(
        pipconf: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_TRUSTED_HOST", "mirror.test")
    fake = Recorder()
    s = http.new_session()
    s.mount("https://", fake)
    http.request(s, "https://mirror.test/simple/demo/", what="t")
    http.request(s, "https://mirror.test.evil/simple/demo/", what="t")
    assert [c["verify"] for c in fake.sent] == [False, True]


def test_pips_proxy_wins_and_never_carries_loopback_http(
        pipconf: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://env-proxy.test:1")
    monkeypatch.setenv("PIP_PROXY", "http://pip-proxy.test:3128")
    fake = Recorder()
    s = http.new_session()
    s.mount("https://", fake)
    http.request(s, "https://files.test/x", what="t")
    assert fake.sent[0]["proxies"]["https"] == "http://pip-proxy.test:3128"
    t = Transport("http://127.0.0.1:5000", adapter=fake)
    t.request("GET", "/v2/")
    assert "http" not in fake.sent[1]["proxies"]  # plain loopback http: no proxy at all


def _cert_failure() -> requests.exceptions.SSLError:
    """What requests raises for an untrusted certificate: its SSLError around urllib3's
    MaxRetryError around urllib3's SSLError around ssl's verification error."""
    inner = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate "
                                            "verify failed: self-signed certificate")
    inner.verify_message = "self-signed certificate"
    reason = urllib3.exceptions.SSLError(inner)
    return requests.exceptions.SSLError(
        urllib3.exceptions.MaxRetryError(None, "/x", reason))  # type: ignore[arg-type]  # no pool


def test_sources_do_not_retry_an_untrusted_certificate(
        pipconf: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CERT", "/etc/hostname")
    fake = Recorder(fail=_cert_failure())
    s = http.new_session()
    s.mount("https://", fake)
    with pytest.raises(TrustError) as err:
        http.request(s, "https://files.test:8443/x.tar.gz", what="download of x")
    assert len(fake.sent) == 1
    line = err.value.one_line()
    assert "certificate of files.test:8443 is not trusted" in line
    assert "self-signed certificate" in line and "/etc/hostname (from PIP_CERT)" in line
    assert "pip config set global.cert FILE" in line and "REQUESTS_CA_BUNDLE" in line
    assert err.value.exit_code == 18 and "\n" not in line


def test_the_registry_does_not_retry_an_untrusted_certificate(
        pipconf: dict[str, Path]) -> None:
    fake = Recorder(fail=_cert_failure())
    t = Transport("https://registry.test", adapter=fake, sleep=lambda s: None)
    with pytest.raises(TrustError) as err:
        t.with_retries("GET /v2/", lambda: t.request("GET", "/v2/"))
    assert len(fake.sent) == 1
    assert re.search(r"certificate of registry.test is not trusted .*certifi's bundle.*"
                     r"pip config set global.cert", err.value.one_line())


def test_other_tls_failures_are_still_retried(pipconf: dict[str, Path]) -> None:
    fake = Recorder(fail=requests.exceptions.SSLError("EOF occurred in violation of protocol"))
    t = Transport("https://registry.test", adapter=fake, sleep=lambda s: None,
                  retry=netpolicy.RetryPolicy(attempts=3))
    with pytest.raises(RegistryError, match="failed after 3 attempts"):
        t.with_retries("GET /v2/", lambda: t.request("GET", "/v2/"))
    assert len(fake.sent) == 3
