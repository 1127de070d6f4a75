"""Independent blobs move concurrently (results in order, first failure raised after the
running transfers end); a refused connection on loopback is reported at once."""

from __future__ import annotations

import threading
import time

import pytest
from patchbake.errors import RegistryError
from patchbake.oci.registry_blobs import concurrency, each_concurrently
from patchbake.oci.unreachable import nothing_listens


def test_results_keep_the_order_and_calls_overlap() -> None:
    running, peak, lock = [0], [0], threading.Lock()
    gate = threading.Barrier(3, timeout=5)

    def fn(i: int) -> int:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        if i < 3:
            gate.wait()  # the first three can only pass together: they run at once
        with lock:
            running[0] -= 1
        return i * 10

    assert each_concurrently(fn, list(range(7)), workers=3) == [0, 10, 20, 30, 40, 50, 60]
    assert peak[0] == 3


def test_first_failure_is_raised_after_running_calls_end() -> None:
    finished: list[int] = []

    def fn(i: int) -> int:
        if i == 1:
            raise RegistryError("blob 1 refused")
        time.sleep(0.05)
        finished.append(i)
        return i

    with pytest.raises(RegistryError, match="blob 1 refused"):
        each_concurrently(fn, list(range(20)), workers=2)
    assert len(finished) < 19  # what had not started was cancelled
    time.sleep(0.1)
    settled = len(finished)
    time.sleep(0.1)
    assert len(finished) == settled  # nothing keeps running in the background


def test_one_worker_or_one_item_runs_inline() -> None:
    names: list[str] = []
    each_concurrently(lambda _: names.append(threading.current_thread().name), [1, 2],
                      workers=1)
    assert set(names) == {threading.current_thread().name}


@pytest.mark.parametrize("value,want", [("", 4), ("8", 8), ("0", 4), ("x", 4), ("99", 16)])
def test_concurrency_setting(value: str, want: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHBAKE_REGISTRY_CONCURRENCY", value)
    assert concurrency() == want


def _refused() -> ConnectionRefusedError:
    """What http.client raises for a refused TCP connection."""
    return ConnectionRefusedError(111, "Connection refused")


def _refused_wrapped() -> Exception:
    """A refusal wrapped by another layer (as an HTTP library's own error, chained)."""
    try:
        try:
            raise _refused()
        except ConnectionRefusedError as inner:
            raise RuntimeError("Failed to establish a new connection") from inner
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize("url", ["http://127.0.0.1:5099/v2/", "http://localhost:5000/v2/",
                                 "http://[::1]:5000/v2/"])
def test_refused_on_loopback_is_not_transient(url: str) -> None:
    for exc in (_refused(), _refused_wrapped()):
        err = nothing_listens(url, exc)
        assert err is not None and err.exit_code == 31
        assert "nothing listens at" in err.message and "`make services`" in (err.hint or "")


def test_refused_elsewhere_or_other_failures_stay_retryable() -> None:
    assert nothing_listens("https://registry.example:443/v2/", _refused()) is None
    assert nothing_listens("http://127.0.0.1:5000/v2/", TimeoutError("timed out")) is None
