"""Fixtures for the authorization tests: the real authorization server (oidc-provider), the
SDK's protected notes server upstream of the gateway, and the gateway as a resource server."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Their helpers need the mcp extra (httpx): on a bare install the folder is skipped.
pytest.importorskip("mcp")
# tests/auth is not a package: its helper module is imported from this folder.
sys.path.insert(0, str(Path(__file__).parent))
from idp import idp_fixture

idp = idp_fixture("module")


from gateway_oauth import Notes, OAuthGateway, notes_server  # noqa: E402  (after the path)
from idp import Idp  # noqa: E402


@pytest.fixture(scope="module")
def notes(idp: Idp, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Notes]:
    """The notes server, protected by the tests' authorization server (its own scope checks)."""
    with notes_server(idp.issuer, tmp_path_factory.mktemp("notes")) as found:
        yield found


@pytest.fixture(scope="module")
def open_notes(idp: Idp, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Notes]:
    """The notes server without authorization of its own (it records what it receives)."""
    with notes_server(idp.issuer, tmp_path_factory.mktemp("open-notes"),
                      open_server=True) as found:
        yield found


@pytest.fixture
def gateway(idp: Idp) -> Iterator[OAuthGateway]:
    """A gateway's reserved address, served as a resource server of *idp* by ``running``."""
    reserved = OAuthGateway(idp.issuer)
    yield reserved
    reserved.close()
