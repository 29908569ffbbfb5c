"""Profiles: provider differences declared as flags, read by the adapters."""

from __future__ import annotations

from dataclasses import replace

import pytest

from anfitrion.models import anthropic, openai_chat, openai_responses
from anfitrion.models._profiles import ANTHROPIC, COMPATIBLE_CHAT, OPENAI_CHAT, OPENAI_RESPONSES

from .conversations import one_tool


def test_a_profile_without_parallel_calls_asks_for_one_call_at_a_time() -> None:
    request = one_tool()
    body = anthropic.to_wire(request, model="m", profile=replace(ANTHROPIC, parallel_calls=False))
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    for module, profile in ((openai_responses, OPENAI_RESPONSES), (openai_chat, COMPATIBLE_CHAT)):
        wire = module.to_wire(request, model="m",  # type: ignore[attr-defined]
                              profile=replace(profile, parallel_calls=False))
        assert wire["parallel_tool_calls"] is False
        assert "parallel_tool_calls" not in module.to_wire(  # type: ignore[attr-defined]
            request, model="m", profile=profile)


def test_only_strict_profiles_send_strict_tools() -> None:
    request = one_tool()
    assert openai_responses.to_wire(request, model="m")["tools"][0]["strict"] is True
    assert "strict" not in openai_chat.to_wire(
        request, model="m", profile=COMPATIBLE_CHAT)["tools"][0]["function"]
    assert "additionalProperties" in anthropic.to_wire(
        request, model="m")["tools"][0]["input_schema"]  # closed by the toolbox itself


def test_the_chat_model_is_strict_only_when_it_talks_to_openai(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("openai")
    from anfitrion.models.openai_chat import OpenAIChatModel

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert OpenAIChatModel("gpt", api_key="k").profile is OPENAI_CHAT
    assert OpenAIChatModel("q", base_url="http://127.0.0.1:1/v1").profile is COMPATIBLE_CHAT
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    assert OpenAIChatModel("q", api_key="k").profile is COMPATIBLE_CHAT
