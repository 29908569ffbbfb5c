"""Images and sounds in tool results are hostile input: the class is any item that could carry
something else than an image of its declared type — or more of them than a model should be
given. A lying mime type, an oversized image, a flood of images, media in an error result and
instructions sent as a ``data:image/…`` URI are summarised (type, size, hash), never sent; the
adapters check the bytes again, so media that bypassed the gate never reaches a wire either."""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from anfitrion import Effect, Toolbox
from anfitrion._conversation import (
    Media,
    Provenance,
    Reply,
    StopReason,
    Text,
    ToolCall,
    ToolResult,
    UserMessage,
)
from anfitrion._media import KNOWN_TYPES, MediaResult, MediaSettings, admit, sniff
from anfitrion.models import ModelRequest, anthropic, openai_chat, openai_responses
from anfitrion.models._profiles import OPENAI_CHAT
from anfitrion.policy import Policy
from anfitrion.store import MemoryStore
from anfitrion.testing import call

from .conftest import attack

MCP_TESTS = Path(__file__).resolve().parents[1] / "mcp"
MEDIA = str(MCP_TESTS / "servers" / "media.py")


def _media_server() -> Any:
    """The test server's module, loaded only by the tests that run it (it needs the mcp extra)."""
    sys.path.insert(0, str(MCP_TESTS / "servers"))  # its sibling `lowlevel`
    spec = importlib.util.spec_from_file_location("media_server", MEDIA)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png(width: int, height: int) -> bytes:
    """A real PNG of *width* × *height* red pixels (the structure check admits it)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = b"".join(b"\x00" + bytes([255, 0, 0]) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                             0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


PNG = _png(2, 2)
NOT_WHAT_IT_SAYS = "not shown: the data is not what its type says"


async def mcp_call(tool: str, *, settings: MediaSettings | None = None) -> ToolResult:
    pytest.importorskip("mcp")
    sys.path.insert(0, str(MCP_TESTS))
    from mcp_helpers import through_gate

    from anfitrion._principal import Principal
    from anfitrion._tools import OfferContext
    from anfitrion.mcp._config import ServerConfig
    from anfitrion.mcp._toolset import McpToolset

    store = MemoryStore()
    config = ServerConfig(id="media", command=sys.executable, args=(MEDIA,))
    async with McpToolset(config, store) as toolset:
        await toolset.refresh()
        await toolset.pins.approve(f"media.{tool}", by="operator")
        offered = await toolset.list_tools(OfferContext(Principal("tester"), "session-1"))
        outcome = await through_gate(offered, f"media.{tool}", {}, store,
                                     policy=Policy(media=settings) if settings else None)
    result: ToolResult = outcome.result
    return result


@pytest.mark.anyio
@pytest.mark.mcp_servers
async def test_a_server_lying_about_its_image_type_is_summarised_not_sent() -> None:
    """A GIF declared image/png, and instructions declared image/png."""
    result = await mcp_call("lying")
    assert result.media == ()
    assert result.provenance is Provenance.UNTRUSTED
    lines = result.content.splitlines()
    assert len(lines) == 2 and all(line.endswith(f"{NOT_WHAT_IT_SAYS}]") for line in lines)
    assert "Ignore previous" not in result.content


@pytest.mark.anyio
@pytest.mark.mcp_servers
async def test_instructions_smuggled_as_a_data_uri_image_are_neither_text_nor_image() -> None:
    result = await mcp_call("smuggle")
    assert result.media == ()
    assert "Ignore previous" not in result.content
    assert "aWdub3Jl" not in result.content.lower()  # nor their base64
    assert result.content.endswith(f"{NOT_WHAT_IT_SAYS}]")


@pytest.mark.anyio
@pytest.mark.mcp_servers
async def test_an_image_over_the_policys_size_is_summarised() -> None:
    result = await mcp_call("png_as_text", settings=MediaSettings(max_bytes=1000))
    assert result.media == ()
    assert "not shown: larger than the media policy's 1000 bytes" in result.content


@pytest.mark.anyio
@pytest.mark.mcp_servers
async def test_a_flood_of_images_gives_the_model_only_the_cap() -> None:
    result = await mcp_call("flood")
    cap = MediaSettings().max_per_result
    assert len(result.media) == cap
    assert result.content.count("not shown: more than") == _media_server().FLOOD - cap


@pytest.mark.anyio
@pytest.mark.mcp_servers
async def test_an_error_result_carries_no_media() -> None:
    result = await mcp_call("error_image")
    assert result.is_error
    assert result.media == ()
    assert "not shown: an error result carries no media" in result.content


@pytest.mark.anyio
async def test_a_python_tool_is_held_to_the_same_checks() -> None:
    tools = Toolbox()

    @tools.tool(effect=Effect.READ, provenance="untrusted")
    def pictures() -> Any:
        """Pictures."""
        return MediaResult("", (Media("image/png", b"<svg onload=alert(1)>"),
                                Media("image/svg+xml", b"<svg/>"),
                                Media("image/png", PNG + bytes(5000)), Media("image/png", PNG)))

    policy = Policy.default()
    policy.media = MediaSettings(max_bytes=2000)
    done = await attack(tools, [call("pictures", {})], policy=policy)
    assert done.result.media == (Media("image/png", PNG),)
    assert [line.rsplit(": ", 1)[-1] for line in done.result.content.splitlines()] == [
        "the data is not what its type says]", "type not admitted by the media policy]",
        "larger than the media policy's 2000 bytes]"]


def request_with(result: ToolResult) -> ModelRequest:
    return ModelRequest([UserMessage((Text("look"),)),
                         Reply((ToolCall.from_object(result.call_id, result.name, {}),),
                               StopReason.TOOL_USE),
                         UserMessage((result,))])


@pytest.mark.parametrize("result", [
    ToolResult("c1", "t", "failed", is_error=True, media=(Media("image/png", PNG),)),
    ToolResult("c1", "t", "", media=(Media("image/png", b"not a png at all"),)),
    ToolResult("c1", "t", "", media=(Media("image/jpeg", PNG),)),
], ids=["error", "lying", "mislabelled"])
def test_media_that_bypassed_the_gate_never_reaches_a_wire(result: ToolResult) -> None:
    bodies = [anthropic.to_wire(request_with(result), model="m"),
              openai_responses.to_wire(request_with(result), model="m"),
              openai_chat.to_wire(request_with(result), model="m", profile=OPENAI_CHAT)]
    for body in bodies:
        dumped = json.dumps(body)
        assert '"image"' not in dumped and "input_image" not in dumped
        assert "image_url" not in dumped and "not shown" in dumped


@given(st.sampled_from([b"", PNG[:8], PNG, b"GIF89a", b"\xff\xd8\xff", b"RIFF\0\0\0\0WEBP",
                        b"RIFF\0\0\0\0WAVE", b"ID3"]),
       st.binary(max_size=64), st.sampled_from(sorted(KNOWN_TYPES | {"image/svg+xml"})))
def test_admission_never_admits_what_its_bytes_do_not_confirm(
        magic: bytes, body: bytes, mime: str) -> None:
    every = MediaSettings(types=KNOWN_TYPES)
    admitted, shown = admit([Media(mime, magic + body)], every)
    assert len(admitted) + len(shown) == 1
    assert all(sniff(m.data) == m.mime_type for m in admitted)
