"""Shared fixtures. A guard makes any real network connection from a test fail."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

_real_connect = socket.socket.connect


def _is_local(address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return True
    host = address[0]
    if host in ("localhost", "", None):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded_connect(self: socket.socket, address: Any) -> Any:
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address):
        raise RuntimeError(f"test tried to reach the network: {address!r}")
    return _real_connect(self, address)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """No test touches the real data folder (~/.local/share/anfitrion) or a configured store."""
    monkeypatch.setenv("ANFITRION_HOME", str(tmp_path_factory.mktemp("anfitrion-home")))
    monkeypatch.delenv("ANFITRION_STORE", raising=False)


CHROMIUM = "/usr/bin/chromium"
"""Debian's Chromium: the browser tests' one browser (they skip without it, unless CI sets
``ANFITRION_REQUIRE_BROWSER=1``)."""
_CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright, launched once per test module."""
    playwright_sync = pytest.importorskip("playwright.sync_api")
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=_CHROMIUM_ARGS,
                                    headless=True)
        assert browser.version in subprocess.run([CHROMIUM, "--version"], capture_output=True,
                                                 text=True, check=True).stdout
        yield browser
        browser.close()


@pytest.fixture
def chromium_page(chromium: Any) -> Iterator[Any]:
    """A page in a fresh context; the test fails if the pages' strict CSP had to block
    anything they use, or a page script threw."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text)
            if "Content Security Policy" in m.text else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    yield page
    context.close()
    assert problems == []
