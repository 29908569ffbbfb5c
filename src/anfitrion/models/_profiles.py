"""What each wire format can do, declared once: the adapters read these flags, nothing else
tests a provider by name.

Example:
    >>> OPENAI_RESPONSES.strict_schemas, COMPATIBLE_CHAT.strict_schemas
    (True, False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .._media import AUDIO_TYPES, IMAGE_TYPES

__all__ = [
    "ANTHROPIC",
    "COMPATIBLE_CHAT",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "Profile",
]


@dataclass(frozen=True, slots=True)
class Profile:
    """Capability flags of one wire format (or one family of servers speaking it).

    Attributes:
        name: the wire format, also the key of its ``provider_details``.
        parallel_calls: a reply may hold several tool calls.
        strict_schemas: send tools in strict mode, schemas through the strict transformer.
        error_flag: results carry an ``is_error`` flag; without it, error results are sent
            as text starting with ``error_prefix`` so the model still sees they failed.
        id_pattern: call ids this format accepts; ids outside it cannot be sent.
        error_prefix: see ``error_flag``.
        tool_name_pattern: tool names this format accepts; others (``git.log`` from an MCP
            server) are sent under a stand-in name and mapped back in the reply.
        media_types: the media types of tool results this format is sent as media (images,
            audio); any other item of a result is sent as its summary line
            (:func:`anfitrion._media.split`). Empty: every item is summarised.
    """

    name: str
    parallel_calls: bool = True
    strict_schemas: bool = False
    error_flag: bool = False
    id_pattern: re.Pattern[str] = re.compile(r".+", re.DOTALL)
    error_prefix: str = "error: "
    tool_name_pattern: re.Pattern[str] = re.compile(r"[a-zA-Z0-9_-]{1,64}")
    media_types: frozenset[str] = frozenset()


ANTHROPIC = Profile("anthropic", error_flag=True,
                    id_pattern=re.compile(r"[a-zA-Z0-9_-]+"), media_types=IMAGE_TYPES)
"""Anthropic Messages: ``is_error`` on results; ids match ``^[a-zA-Z0-9_-]+$``; images go
inside the ``tool_result`` block (no audio input)."""

OPENAI_RESPONSES = Profile("openai_responses", strict_schemas=True, media_types=IMAGE_TYPES)
"""OpenAI Responses: strict function schemas; results have no error flag; images go in the
``function_call_output``'s content list (which takes no audio)."""

OPENAI_CHAT = Profile("openai_chat", strict_schemas=True,
                      media_types=IMAGE_TYPES | AUDIO_TYPES)
"""OpenAI's own Chat Completions endpoint: tool messages are text only, so images and audio
follow in a user message of ``image_url`` / ``input_audio`` parts, labelled as the tool's."""

COMPATIBLE_CHAT = Profile("openai_chat")
"""Any server speaking Chat Completions (llama.cpp, vLLM, Ollama, LM Studio): no strict mode,
which many of them reject or ignore; no media (a text-only model refuses content parts): pass
``dataclasses.replace(COMPATIBLE_CHAT, media_types=IMAGE_TYPES)`` for a vision model."""
