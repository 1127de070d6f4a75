"""The one retry policy: nested loops never multiply, the budget and deadline hold."""

from __future__ import annotations

import pytest
from patchbake.errors import DeadlineError, RegistryError
from patchbake.netpolicy import Budget, Retryable, RetryPolicy, retrying


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def fail(msg: str) -> RegistryError:
    return RegistryError(msg)


def budget(clock: Clock, **kw: float) -> Budget:
    return Budget("push of x", RetryPolicy(**kw), clock=clock, sleep=clock.sleep)  # type: ignore[arg-type]


def test_nested_retry_loops_do_not_multiply() -> None:
    clock = Clock()
    b = budget(clock, requests_base=1000)
    sent = []

    def inner() -> None:
        b.charge()
        sent.append(1)
        raise Retryable("HTTP 503")

    def outer() -> None:
        retrying(b, "POST upload", inner, fail)

    with pytest.raises(RegistryError, match="failed after 5 attempts: HTTP 503"):
        retrying(b, "upload", outer, fail)
    assert len(sent) == 5  # not 25
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0]


def test_request_budget_is_a_hard_cap() -> None:
    clock = Clock()
    b = budget(clock, requests_base=3, attempts=10)

    def once() -> None:
        b.charge()
        raise Retryable("reset")

    with pytest.raises(DeadlineError, match="used its budget of 3 requests") as e:
        retrying(b, "GET", once, fail)
    assert e.value.exit_code == 16 and b.requests == 3


def test_a_wait_past_the_deadline_is_refused_not_slept() -> None:
    clock = Clock()
    b = budget(clock, deadline_s=20.0)

    def once() -> None:
        b.charge()
        raise Retryable("HTTP 429", retry_after=25.0)

    with pytest.raises(DeadlineError, match="would wait 25 s to retry, past its 20 s deadline"):
        retrying(b, "GET", once, fail)
    assert clock.sleeps == []


def test_timeouts_shrink_to_the_time_left() -> None:
    clock = Clock()
    b = budget(clock, deadline_s=30.0, read_timeout_s=60.0, connect_timeout_s=10.0)
    assert b.charge() == (10.0, 30.0)
    clock.now = 25.0
    assert b.charge() == (5.0, 5.0)
    clock.now = 31.0
    with pytest.raises(DeadlineError, match="ran past its 30 s deadline"):
        b.charge()


def test_retry_after_is_capped() -> None:
    assert RetryPolicy().wait(0, 1000.0) == 30.0
    assert RetryPolicy().wait(3, None) == 4.0
    assert RetryPolicy().wait(10, None) == 8.0


def test_limits_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    from patchbake import limits
    from patchbake.errors import ConfigError

    monkeypatch.setenv("PATCHBAKE_DEADLINE_S", "12.5")
    monkeypatch.setenv("PATCHBAKE_EXTRACT_MEMBERS", "7")
    lm = limits.current()
    assert lm.deadline_s == 12.5 and lm.extract_members == 7
    assert RetryPolicy.from_limits(lm).deadline_s == 12.5
    monkeypatch.setenv("PATCHBAKE_EXTRACT_MEMBERS", "lots")
    with pytest.raises(ConfigError, match="PATCHBAKE_EXTRACT_MEMBERS='lots' is not a number"):
        limits.current()


def test_a_body_is_bounded_whatever_its_chunking() -> None:
    """One socket read at a time: a drip under the minimum rate fails its attempt after a
    window; a faster one still ends at the deadline, checked between reads."""
    from patchbake.netpolicy import Retryable

    t = [0.0]
    slow = Budget("pull", RetryPolicy(deadline_s=100.0, min_rate_bps=1024, read_timeout_s=10.0),
                  clock=lambda: t[0])

    def drip() -> bytes:  # one byte every 2 s
        t[0] += 2.0
        return b"x"

    with pytest.raises(Retryable, match="under 1024 bytes/s"):
        for _ in slow.body(drip, "GET blob"):
            pass
    assert t[0] <= 12.0
    t[0] = 0.0
    fast = Budget("pull", RetryPolicy(deadline_s=30.0, min_rate_bps=1024, read_timeout_s=10.0),
                  clock=lambda: t[0])

    def steady() -> bytes:  # 20 KB/s in small reads, forever
        t[0] += 0.1
        return b"x" * 2048

    with pytest.raises(DeadlineError, match="30 s deadline"):
        for _ in fast.body(steady, "GET blob"):
            pass
    assert t[0] <= 30.2
    fresh = Budget("pull", RetryPolicy(), clock=lambda: 0.0)
    assert list(fresh.body(iter([b"ab", b""]).__next__, "GET")) == [b"ab"]


def test_a_silent_peer_is_given_up_within_minutes() -> None:
    pol = RetryPolicy.from_limits()
    assert pol.silent_peer_s() <= 90 and pol.silent_peer_s() < pol.deadline_s


@pytest.mark.parametrize("command", ["fetch", "push", "pull"])
def test_help_says_how_long_a_silent_server_is_waited_for(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A person reads the wait before starting it: the figure is the policy's own."""
    from patchbake.entry import main

    assert main([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    wait = RetryPolicy().silent_peer_s()
    assert wait <= 90
    assert f"never answers is given up after about {wait:.0f} s" in text, text
