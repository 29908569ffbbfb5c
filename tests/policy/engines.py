"""The policy engines of the ``cedar`` extra and the test extra (``cedarpy``; ``opa_eval``, an
in-process Rego engine), and ``httpx`` (the ``http`` extra) for decision points. On a bare
install their tests skip, unless
``ANFITRION_REQUIRE_POLICY_ENGINES=1`` (CI) makes a missing engine a failure."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

REQUIRE = "ANFITRION_REQUIRE_POLICY_ENGINES"


def engine(module: str) -> ModuleType:
    """*module*, imported; a skip (or a failure under ``ANFITRION_REQUIRE_POLICY_ENGINES=1``)
    when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError:
        message = f"{module} is not installed: pip install -e '.[test]'"
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(message)
        pytest.skip(message, allow_module_level=True)
