"""Fixtures for the real local model: the GGUF file, a llama.cpp instance, the endpoint.

The model tests skip when the ``local`` extra or the weights are missing, unless
``ANFITRION_REQUIRE_LOCAL_MODEL=1`` (set by CI), which turns the skip into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from anfitrion.exceptions import MissingDependencyError

WEATHER: dict[str, Any] = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a given location.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": 'City and country, e.g. "Lisboa, PT".'},
        "units": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
        "required": ["location"], "additionalProperties": False}}}

SAVE_NOTE: dict[str, Any] = {"type": "function", "function": {
    "name": "save_note",
    "description": "Save a short note for the team under drafts/. Use only when asked to.",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": 'Where to save it, e.g. "drafts/a.md".'},
        "text": {"type": "string"}},
        "required": ["path", "text"], "additionalProperties": False}}}


def _unavailable(reason: str) -> None:
    if os.environ.get("ANFITRION_REQUIRE_LOCAL_MODEL") == "1":
        pytest.fail(f"the local model is required here: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def model_path() -> Path:
    from anfitrion.localmodel import find_model_file

    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        _unavailable("llama-cpp-python is not installed (the local extra)")
    try:
        return find_model_file("smollm2")
    except MissingDependencyError as exc:
        _unavailable(str(exc))
        raise


@pytest.fixture(scope="session")
def llama(model_path: Path) -> Iterator[Any]:
    from llama_cpp import Llama

    instance = Llama(model_path=str(model_path), n_ctx=4096, n_threads=1, n_threads_batch=1,
                     verbose=False)
    yield instance
    instance.close()


@pytest.fixture(scope="session")
def server(model_path: Path) -> Iterator[Any]:
    from anfitrion.localmodel import LocalServer

    with LocalServer(model_path) as running:
        yield running


@pytest.fixture
def client(server: Any) -> Iterator[Any]:
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=server.base_url, api_key=server.api_key,
                       max_retries=0, timeout=60) as sdk:
        yield sdk


@pytest.fixture(scope="session")
def weather_tool() -> dict[str, Any]:
    return WEATHER


@pytest.fixture(scope="session")
def tools() -> list[dict[str, Any]]:
    return [WEATHER, SAVE_NOTE]
