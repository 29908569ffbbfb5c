"""Model strings: one line to switch providers, one-line errors when something is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from anfitrion.exceptions import MissingDependencyError, UserError
from anfitrion.models import Model
from anfitrion.models._registry import resolve_model


def test_scripted_demo_needs_nothing() -> None:
    model = resolve_model("scripted:demo")
    assert isinstance(model, Model)
    assert model.name == "scripted-demo"


@pytest.mark.parametrize(("spec", "variable"), [
    ("anthropic:claude-test", "ANTHROPIC_API_KEY"),
    ("openai:gpt-test", "OPENAI_API_KEY"),
    ("openai-chat:gpt-test", "OPENAI_API_KEY"),
])
def test_a_missing_key_names_the_variable_to_set(spec: str, variable: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip(spec.split(":")[0].split("-")[0])
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(UserError, match=f"set {variable}$"):
        resolve_model(spec)


@pytest.mark.parametrize(("spec", "name"), [
    ("anthropic:claude-test", "anthropic:claude-test"),
    ("openai:gpt-test", "openai:gpt-test"),
    ("openai-chat:gpt-test", "openai-chat:gpt-test"),
])
def test_each_provider_string_builds_its_model(spec: str, name: str) -> None:
    pytest.importorskip(spec.split(":")[0].split("-")[0])
    model = resolve_model(spec, api_key="test-key", timeout=5, max_retries=0)
    assert model.name == name


def test_a_compatible_server_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = resolve_model("openai-chat:qwen", base_url="http://127.0.0.1:8080/v1")
    assert model.name == "openai-chat:qwen"


@pytest.mark.parametrize(("spec", "extra", "module"), [
    ("anthropic:claude-test", "anthropic", "anthropic"),
    ("openai:gpt-test", "openai", "openai"),
    ("openai-chat:qwen", "openai", "openai"),
])
def test_a_missing_sdk_names_the_extra_to_install(spec: str, extra: str, module: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingDependencyError, match=rf"pip install 'anfitrion\[{extra}\]'"):
        resolve_model(spec, api_key="test-key")


def test_local_without_its_module_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anfitrion.localmodel", None)
    with pytest.raises(MissingDependencyError, match=r"anfitrion\[local\]"):
        resolve_model("local:qwen")


@pytest.mark.parametrize("spec", ["gpt-4o", "anthropic:", "bedrock:claude", "scripted:other"])
def test_unknown_or_incomplete_strings_are_user_errors(spec: str) -> None:
    with pytest.raises(UserError):
        resolve_model(spec)


def test_importing_the_adapters_imports_no_sdk() -> None:
    code = ("import sys, anfitrion, anfitrion.models._registry, anfitrion.models.anthropic, "
            "anfitrion.models.openai_responses, anfitrion.models.openai_chat, "
            "anfitrion._cli.chat; "
            "print(sorted(m for m in ('anthropic', 'openai', 'httpx2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"

