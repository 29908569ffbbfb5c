"""A tool result's images and sounds reach each provider the way its API documents, through the
real SDK clients against a local server; a format that cannot take an item gets its summary.

- Anthropic: ``image`` blocks inside the ``tool_result``'s content (no audio input);
- OpenAI Responses: ``input_image`` parts in the ``function_call_output``'s content list;
- OpenAI Chat: tool messages are text only, so one following ``user`` message of ``image_url``
  and ``input_audio`` parts, labelled as the tool's data;
- a compatible Chat server (no declared media): the summary, as before media parts.
"""

from __future__ import annotations

import base64
import io
import struct
import wave
import zlib
from typing import Any

import anyio
import pytest

from anfitrion import Effect, Host, RunStatus, Toolbox
from anfitrion._conversation import Media, ToolResult
from anfitrion._media import MediaResult
from anfitrion.models._base import Model
from anfitrion.models._profiles import OPENAI_CHAT
from anfitrion.policy import parse_policy

from .fake_providers import FINAL, anthropic_brain, chat_brain, responses_brain, serve

pytest.importorskip("anthropic")
pytest.importorskip("openai")

from anfitrion.models.anthropic import AnthropicModel
from anfitrion.models.openai_chat import OpenAIChatModel
from anfitrion.models.openai_responses import OpenAIResponsesModel

pytestmark = pytest.mark.anyio


def png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = b"".join(b"\x00" + bytes([255, 0, 0]) * 4 for _ in range(4))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 4, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def wav(frames: int) -> bytes:
    """A real WAV (16-bit mono silence at 8 kHz), written by the standard library."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(bytes(2 * frames))
    return buffer.getvalue()


PNG = png()
WAV = wav(200)
PNG64 = base64.b64encode(PNG).decode()
WAV64 = base64.b64encode(WAV).decode()
CALLS = (("snapshot", {}),)
POLICY = """
[media]
types = ["image/png", "audio/wav"]
"""


def toolbox() -> Toolbox:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, provenance="untrusted")
    def snapshot() -> Any:
        """A picture and a recording of the room."""
        return MediaResult("a red square and a silence",
                           (Media("image/png", PNG), Media("audio/wav", WAV)))

    return tools


async def run(model: Model) -> tuple[Any, list[ToolResult]]:
    host = Host(model=model, tools=toolbox(), policy=parse_policy(POLICY), max_turns=4)
    with anyio.fail_after(30):
        run = await host.run("What is in the room?", principal="alice")
    assert run.status is RunStatus.COMPLETED, run.error
    assert run.output == FINAL
    return run, run.transcript.tool_results


def summary(data: bytes, mime: str, why: str) -> str:
    digest = Media(mime, data).sha256[:16]
    return f"[{mime.split('/')[0]} {mime}, {len(data)} bytes, sha256 {digest}: {why}]"


async def test_the_gate_admits_both_items_under_a_policy_that_allows_audio() -> None:
    with serve(anthropic_brain(CALLS)) as server:
        _, results = await run(AnthropicModel("claude-test", api_key="k", base_url=server.url,
                                              max_retries=0, timeout=20))
    (result,) = results
    assert result.media == (Media("image/png", PNG), Media("audio/wav", WAV))
    assert result.content == "a red square and a silence"


async def test_anthropic_gets_the_image_inside_the_tool_result_and_the_sound_summarised() -> None:
    with serve(anthropic_brain(CALLS)) as server:
        await run(AnthropicModel("claude-test", api_key="k", base_url=server.url, max_retries=0,
                                 timeout=20))
    block = server.requests[1].body["messages"][2]["content"][0]
    assert block["type"] == "tool_result"
    assert block["content"] == [
        {"type": "text", "text": "a red square and a silence\n" + summary(
            WAV, "audio/wav", "not shown: this model is not sent this type")},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": PNG64}}]


async def test_openai_responses_gets_the_image_in_the_function_call_output() -> None:
    with serve(responses_brain(CALLS)) as server:
        await run(OpenAIResponsesModel("gpt-test", api_key="k", base_url=f"{server.url}/v1",
                                       max_retries=0, timeout=20))
    output = server.requests[1].body["input"][-1]
    assert output["type"] == "function_call_output"
    assert output["output"] == [
        {"type": "input_text", "text": "a red square and a silence\n" + summary(
            WAV, "audio/wav", "not shown: this model is not sent this type")},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG64}"}]


async def test_openai_chat_gets_image_and_audio_in_a_user_message_after_the_tool_message() -> None:
    with serve(chat_brain(CALLS)) as server:
        await run(OpenAIChatModel("gpt-test", api_key="k", base_url=f"{server.url}/v1",
                                  profile=OPENAI_CHAT, max_retries=0, timeout=20))
    tool, media = server.requests[1].body["messages"][-2:]
    assert tool["role"] == "tool"
    assert tool["content"] == "\n".join([
        "a red square and a silence",
        summary(PNG, "image/png", "attached in the next message"),
        summary(WAV, "audio/wav", "attached in the next message")])
    assert media["role"] == "user"
    label, image, audio = media["content"]
    assert label["type"] == "text" and "is the tool's data, not the user's words" in label["text"]
    assert tool["tool_call_id"] in label["text"]
    assert image == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG64}"}}
    assert audio == {"type": "input_audio", "input_audio": {"data": WAV64, "format": "wav"}}


async def test_a_compatible_chat_server_gets_the_summary_only() -> None:
    with serve(chat_brain(CALLS)) as server:
        await run(OpenAIChatModel("local", base_url=f"{server.url}/v1", max_retries=0,
                                  timeout=20))
    last = server.requests[1].body["messages"][-1]
    assert last["role"] == "tool"
    why = "not shown: this model is not sent this type"
    assert last["content"] == "\n".join(["a red square and a silence",
                                         summary(PNG, "image/png", why),
                                         summary(WAV, "audio/wav", why)])
    assert PNG64 not in str(server.requests[1].body)
