"""Media in results: images (and audio when allowed) reach the gate as media parts, never as
base64 text cut at the result limit; what is not admitted is a summary (type, size, SHA-256).
A real MCP server over stdio returning media the ways servers do."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("mcp")
from mcp_helpers import through_gate

from anfitrion._conversation import Media
from anfitrion._media import AUDIO_TYPES, IMAGE_TYPES, SUMMARY, MediaSettings
from anfitrion._tools import OfferContext
from anfitrion.mcp import _media
from anfitrion.mcp._config import ServerConfig
from anfitrion.mcp._toolset import McpToolset
from anfitrion.policy import Policy
from anfitrion.store import MemoryStore

pytestmark = [pytest.mark.anyio, pytest.mark.mcp_servers]

MEDIA = str(Path(__file__).parent / "servers" / "media.py")
_spec = importlib.util.spec_from_file_location("media_server", MEDIA)
assert _spec is not None and _spec.loader is not None
media = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(media)


def summary(kind: str, mime: str, data: bytes, why: str = "not shown") -> str:
    return (f"[{kind} {mime}, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}"
            f": {why}]")


async def call(tool: str, store: MemoryStore, offer: OfferContext, *,
               settings: MediaSettings | None = None, policy: Policy | None = None) -> Any:
    config = ServerConfig(id="media", command=sys.executable, args=(MEDIA,))
    async with McpToolset(config, store, media=settings) as toolset:
        await toolset.refresh()
        await toolset.pins.approve(f"media.{tool}", by="operator")
        outcome = await through_gate(await toolset.list_tools(offer), f"media.{tool}", {}, store,
                                     policy=policy)
    return outcome.result


@pytest.mark.parametrize("tool", ["png_as_text", "data_uri"])
async def test_an_image_sent_as_base64_text_reaches_the_model_as_an_image(
        tool: str, store: MemoryStore, offer: OfferContext) -> None:
    """server-filesystem's read_media_file and others send images as text: 16,384 characters
    of base64, cut, would be all the model sees."""
    assert len(media.ENCODED) > 16_384
    result = await call(tool, store, offer)
    assert not result.is_error
    assert result.content == ""
    assert result.media == (Media("image/png", media.IMAGE),)
    assert not result.truncated


async def test_a_toolset_set_to_summarise_shows_images_as_their_summary(
        store: MemoryStore, offer: OfferContext) -> None:
    result = await call("png_as_text", store, offer, settings=SUMMARY)
    assert result.media == ()
    assert result.content == summary("image", "image/png", media.IMAGE,
                                     "not shown: the media policy summarises media")
    structured = await call("read_media_file", MemoryStore(), offer, settings=SUMMARY)
    assert structured.media == ()
    assert "image sent as base64 text, image/png" in structured.content


async def test_an_image_block_with_base64_in_structured_content_is_one_image(
        store: MemoryStore, offer: OfferContext) -> None:
    """The block is the image; the same base64 in the structured value stays summarised."""
    result = await call("read_media_file", store, offer)
    assert not result.is_error
    assert not result.truncated
    assert result.media == (Media("image/png", media.IMAGE),)
    shown = json.loads(result.content)
    assert shown == {"content": [{"type": "image", "mimeType": "image/png", "data": summary(
        "image sent as base64 text,", "image/png", media.IMAGE)}]}


async def test_audio_is_summarised_unless_the_policy_admits_it(
        store: MemoryStore, offer: OfferContext) -> None:
    by_default = await call("audio", store, offer)
    assert by_default.media == ()
    assert by_default.content == summary("audio", "audio/wav", media.WAV,
                                         "not shown: type not admitted by the media policy")
    both = MediaSettings(types=IMAGE_TYPES | AUDIO_TYPES)
    allowed = await call("mixed", MemoryStore(), offer, settings=both, policy=Policy(media=both))
    assert allowed.content == "a red square and a silence"
    assert allowed.media == (Media("image/png", media.IMAGE), Media("audio/wav", media.WAV))


async def test_the_hosts_policy_holds_over_a_toolset_that_sends(
        store: MemoryStore, offer: OfferContext) -> None:
    """The toolset passes the sound on; the policy (images only) summarises it."""
    both = MediaSettings(types=IMAGE_TYPES | AUDIO_TYPES)
    result = await call("mixed", store, offer, settings=both)
    assert result.media == (Media("image/png", media.IMAGE),)
    assert result.content == "a red square and a silence\n" + summary(
        "audio", "audio/wav", media.WAV, "not shown: type not admitted by the media policy")


async def test_binary_resources_are_told_by_type_size_and_hash(
        store: MemoryStore, offer: OfferContext) -> None:
    result = await call("blob", store, offer)
    expected = summary("resource", "image/png", media.IMAGE)
    assert result.content == f"{expected[:-1]} (file:///photo.png)]"
    assert result.media == ()


@pytest.mark.parametrize(("tool", "encoded"), [
    ("token", base64.b64encode(b"session-token-1234").decode()),
    ("noise", base64.b64encode(bytes(range(256)) * 8).decode()),
])
async def test_base64_text_that_is_not_media_stays_text(
        tool: str, encoded: str, store: MemoryStore, offer: OfferContext) -> None:
    """Short tokens, and long base64 of no known media type, are the server's text."""
    result = await call(tool, store, offer)
    assert result.content == encoded


@given(st.text(max_size=2000))
def test_any_text_is_either_left_as_it_is_or_summarised(text: str) -> None:
    found = _media.base64_summary(text)
    assert found is None or (found.startswith("[") and found.endswith(": not shown]"))


@given(st.binary(min_size=400, max_size=3000), st.sampled_from([
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
    (b"%PDF-", "application/pdf")]), st.booleans())
def test_media_as_base64_is_told_by_its_real_size_and_hash(
        body: bytes, signature: tuple[bytes, str], wrapped: bool) -> None:
    magic, mime = signature
    data = magic + body
    encoded = base64.b64encode(data).decode()
    if wrapped:  # line-wrapped base64, as MIME encoders write it
        encoded = "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76))
    found = _media.base64_summary(encoded)
    assert found is not None
    assert f"{mime}, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}" in found
