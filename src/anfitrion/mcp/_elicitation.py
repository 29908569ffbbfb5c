"""Elicitation for the client toolset: a server asking the host's person a question mid-call.

A host offers elicitation only when the application gives a handler *and* the server's entry
allows it (``"elicitation": true``, the setting the gateway uses to relay it); only then is the
capability declared. Every request is checked before the handler sees it:

- only form mode, with the flat schema MCP allows: an object of primitive properties (string,
  number, integer, boolean, enums and multi-select enums), known keys only, bounded sizes —
  anything else (nested objects, ``$ref``, ``pattern``, huge enums) is refused;
- a request asking for a secret — a field or message about passwords, tokens, API keys,
  credentials, or ``format: password`` — is refused: MCP forbids asking for them in form mode,
  and a server that does is phishing through the host;
- hidden characters in the message and the labels are made visible.

When the handler accepts, the defaults of the fields it left out are applied (SEP-1034) and the
answer is checked against the schema. The toolset audits every request and answer
(``mcp.relayed``: the field names and the action, never the values).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp.types as mt

from .._tools import ArgumentValidator, SchemaBudgetExceeded, schema_errors
from ._secret_classes import normalised, secret_class

__all__ = ["Elicitation", "ElicitationAnswer", "ElicitationHandler", "answer_elicitation",
           "schema_problem", "secret_problem", "with_defaults"]

log = logging.getLogger("anfitrion.mcp")

MAX_FIELDS = 32
MAX_LABEL_CHARS = 500
MAX_MESSAGE_CHARS = 4000
MAX_ENUM = 100
MAX_SCHEMA_BYTES = 32 * 1024
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_TOP_KEYS = frozenset({"type", "properties", "required", "title", "description", "$schema",
                       "additionalProperties"})
_LABELS = frozenset({"type", "title", "description", "default"})
_KEYS: Mapping[str, frozenset[str]] = {
    "string": _LABELS | {"minLength", "maxLength", "format", "enum", "enumNames", "oneOf"},
    "number": _LABELS | {"minimum", "maximum"},
    "integer": _LABELS | {"minimum", "maximum"},
    "boolean": _LABELS,
    "array": _LABELS | {"items", "minItems", "maxItems"},
}
_FORMATS = frozenset({"email", "uri", "date", "date-time"})
_SECRET = re.compile(
    r"\b(pass ?words?|passwd|pass ?phrases?|pass ?codes?|pwd|pins?|secrets?|tokens?|"
    r"api ?keys?|access ?keys?|secret ?keys?|private ?keys?|credentials?|otp|totp|mfa|2fa|"
    r"one time (code|password)|cvv|cvc|security codes?|seed phrases?|recovery (codes?|phrases?)"
    r"|contraseñas?|passwort|mot de passe)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Elicitation:
    """What a server asks the host's person, checked (see the module docstring).

    Attributes:
        server: the server's id in the config.
        message: the server's question, hidden characters made visible.
        schema: the requested form: ``{"type": "object", "properties": {…}, "required": […]}``
            of primitive properties, each possibly with a ``default``.
        tool: the call during which the server asks (``<server>.<tool>``).
        session_id: the anfitrion session of that call.
    """

    server: str
    message: str
    schema: Mapping[str, Any]
    tool: str = ""
    session_id: str = ""

    @property
    def fields(self) -> list[str]:
        return list(self.schema.get("properties", {}))


@dataclass(frozen=True)
class ElicitationAnswer:
    """The person's answer: ``accept`` with the values (fields left out get their defaults),
    ``decline`` or ``cancel``."""

    action: Literal["accept", "decline", "cancel"]
    content: Mapping[str, Any] = field(default_factory=dict)


ElicitationHandler = Callable[[Elicitation], Awaitable[ElicitationAnswer]]
"""Asks the host's person (an application's dialog, a chat message, a CLI prompt)."""
Reveal = Callable[[str], str]
"""Makes hidden characters visible (the toolset's, shared with results)."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _strings(value: Any, *, limit: int = MAX_ENUM) -> bool:
    return isinstance(value, list) and 0 < len(value) <= limit and all(
        isinstance(v, str) and len(v) <= MAX_LABEL_CHARS for v in value)


def _choices(value: Any) -> bool:
    """``[{"const": …, "title": …}, …]`` (titled enum options)."""
    return isinstance(value, list) and 0 < len(value) <= MAX_ENUM and all(
        isinstance(v, dict) and set(v) <= {"const", "title"} and isinstance(v.get("const"), str)
        and isinstance(v.get("title", ""), str) and len(str(v.get("title", ""))) <= MAX_LABEL_CHARS
        for v in value)


def _property_problem(prop: Any) -> str | None:
    if not isinstance(prop, dict):
        return "is not an object"
    kind = prop.get("type")
    if not isinstance(kind, str) or kind not in _KEYS:
        return f"has type {str(kind)[:40]!r}: only string, number, integer, boolean and " \
               "arrays of enum strings are allowed (no nested objects)"
    extra = sorted(set(prop) - _KEYS[kind])
    if extra:
        return f"has {extra[0][:40]!r}, which MCP's elicitation schema does not have"
    for key in ("title", "description"):
        if key in prop and not (isinstance(prop[key], str) and len(prop[key]) <= MAX_LABEL_CHARS):
            return f"has a {key} that is not a string of at most {MAX_LABEL_CHARS} characters"
    for key in ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"):
        if key in prop and not _is_number(prop[key]):
            return f"has a {key} that is not a number"
    if kind == "string":
        return _string_problem(prop)
    if kind == "array":
        items = prop.get("items")
        if not (isinstance(items, dict) and (
                (set(items) <= {"type", "enum"} and items.get("type") == "string"
                 and _strings(items.get("enum")))
                or (set(items) <= {"anyOf"} and _choices(items.get("anyOf"))))):
            return "is an array whose items are not a list of enum strings"
        if "default" in prop and not _strings(prop["default"]):
            return "has a default that is not a list of strings"
        return None
    default = prop.get("default")
    if "default" in prop and not (isinstance(default, bool) if kind == "boolean"
                                  else isinstance(default, int) and _is_number(default)
                                  if kind == "integer" else _is_number(default)):
        return f"has a default that is not a {kind}"
    return None


def _string_problem(prop: dict[str, Any]) -> str | None:
    if "format" in prop and prop["format"] not in _FORMATS and prop["format"] != "password":
        return f"has format {str(prop['format'])[:40]!r} (allowed: {', '.join(sorted(_FORMATS))})"
    if "enum" in prop and not _strings(prop["enum"]):
        return f"has an enum that is not a list of at most {MAX_ENUM} strings"
    if "enumNames" in prop and not (_strings(prop["enumNames"])
                                    and len(prop["enumNames"]) == len(prop.get("enum", []))):
        return "has enumNames that do not match its enum"
    if "oneOf" in prop and not _choices(prop["oneOf"]):
        return "has a oneOf that is not a list of {const, title} options"
    default = prop.get("default")
    if "default" in prop and not (isinstance(default, str) and len(default) <= MAX_LABEL_CHARS):
        return "has a default that is not a string"
    return None


def schema_problem(schema: Any) -> str | None:
    """Why *schema* is not the flat primitive form MCP allows (``None``: it is).

    Example:
        >>> schema_problem({"type": "object", "properties": {"a": {"type": "object"}}})[:30]
        "field 'a' has type 'object': o"
    """
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "the requested schema is not an object schema"
    try:
        size = len(json.dumps(schema))
    except (TypeError, ValueError, RecursionError):
        return "the requested schema is not plain JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"the requested schema has {size} bytes (at most {MAX_SCHEMA_BYTES})"
    extra = sorted(set(schema) - _TOP_KEYS)
    if extra or schema.get("additionalProperties", False) is not False:
        return f"the requested schema has {(extra or ['additionalProperties'])[0][:40]!r}, " \
               "which MCP's elicitation schema does not have"
    properties = schema.get("properties", {})
    if not isinstance(properties, dict) or not 0 < len(properties) <= MAX_FIELDS:
        return f"the requested schema must have 1 to {MAX_FIELDS} properties"
    for name, prop in properties.items():
        if not _NAME.fullmatch(name):
            return f"field name {name[:40]!r} is not [A-Za-z0-9_.-]{{1,64}}"
        problem = _property_problem(prop)
        if problem is not None:
            return f"field {name!r} {problem}"
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(r in properties for r in required) \
            or len(set(required)) != len(required):
        return "'required' must list the schema's own fields, each once"
    return None


def _words(text: str) -> str:
    """``apiKey`` / ``api_key`` / ``API-Key`` → ``api key`` (for the secret words)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|[_\-.]+", " ", text)


def _found(text: str) -> str | None:
    """What secret *text* asks for, by meaning class (:mod:`anfitrion.mcp._secret_classes`)
    or the general words, over the normalised text; ``None`` if nothing."""
    plain = _words(normalised(text))
    meaning = secret_class(plain)
    if meaning is not None:
        return meaning
    found = _SECRET.search(plain)
    return found.group(0).lower() if found else None


def secret_problem(message: str, schema: Mapping[str, Any]) -> str | None:
    """Why the request asks for a secret (``None``: it does not seem to).

    Names, titles, descriptions, choices and the message are read after NFKC with invisible
    characters removed, for the meaning classes (payment card, one-time or verification
    code, password, API key or token, recovery phrase) and the general secret words.

    Example:
        >>> secret_problem("Your name?", {"properties": {"apiKey": {"type": "string"}}})
        "field 'apiKey' asks for a secret (API key or token: api key)"
    """
    for name, prop in schema.get("properties", {}).items():
        if prop.get("format") == "password":
            return f"field {name!r} asks for a secret (format 'password')"
        texts = [name, prop.get("title", ""), prop.get("description", ""),
                 *[str(c) for c in prop.get("enum", ()) or ()],
                 *[str(o.get("title", "")) for o in prop.get("oneOf", ()) or ()
                   if isinstance(o, Mapping)]]
        for text in texts:
            found = _found(str(text))
            if found:
                return f"field {name!r} asks for a secret ({found})"
    found = _found(message)
    if found:
        return f"the message asks for a secret ({found})"
    return None


def with_defaults(schema: Mapping[str, Any], content: Mapping[str, Any]) -> dict[str, Any]:
    """*content* with the default of every field it left out (SEP-1034)."""
    filled = dict(content)
    for name, prop in schema.get("properties", {}).items():
        if name not in filled and "default" in prop:
            filled[name] = prop["default"]
    return filled


def _refused(reason: str) -> mt.ErrorData:
    return mt.ErrorData(code=mt.INVALID_PARAMS,
                        message=f"elicitation/create refused by anfitrion: {reason}")


async def answer_elicitation(server: str, params: Any, handler: ElicitationHandler, *,
                             reveal: Reveal, tool: str = "", session_id: str = "",
                             ) -> tuple[mt.ElicitResult | mt.ErrorData, str]:
    """Check the server's request, ask *handler*, check its answer: the result for the server
    and what the audit log says about it."""
    if getattr(params, "mode", "form") != "form":
        return _refused("only form elicitation is supported (a URL was asked for)"), \
            "refused: URL-mode elicitation"
    message = reveal(str(params.message)[:MAX_MESSAGE_CHARS])
    schema: Any = params.requested_schema
    problem = schema_problem(schema)
    if problem is None and len(params.message) > MAX_MESSAGE_CHARS:
        problem = f"the message is longer than {MAX_MESSAGE_CHARS} characters"
    if problem is not None:
        return _refused(problem), f"refused: {problem}"
    # read as written (hidden characters removed, not made visible: `pass<U+200B>word`)
    secret = secret_problem(str(params.message)[:MAX_MESSAGE_CHARS], schema)
    if secret is not None:
        return _refused(f"{secret}; a server may never ask for secrets through elicitation"), \
            f"refused: {secret}"
    shown = _labels_shown(schema, reveal)
    asked = Elicitation(server, message, shown, tool=tool, session_id=session_id)
    note = " (hidden characters made visible)" if shown != schema or message != \
        params.message else ""
    answer = await handler(asked)
    fields = ", ".join(asked.fields)
    if answer.action != "accept":
        return mt.ElicitResult(action=answer.action), f"{answer.action}d by the person " \
            f"(asked for {fields}){note}"
    content = with_defaults(schema, answer.content)
    try:
        checker = ArgumentValidator({**schema, "additionalProperties": False})
        error = next(iter(schema_errors(checker, content)), None)
    except (SchemaBudgetExceeded, OverflowError, ValueError) as exc:
        error_text: str | None = str(exc)
    else:
        error_text = error.message[:200] if error is not None else None
    if error_text is not None:
        return mt.ErrorData(code=mt.INTERNAL_ERROR, message="elicitation/create: the host's "
                            f"answer does not match the requested schema: {error_text}"), \
            f"answer dropped: it does not match the requested schema ({error_text})"
    defaulted = sorted(set(content) - set(answer.content))
    return mt.ElicitResult(action="accept", content=content), (
        f"accepted by the person: {', '.join(sorted(content))}"
        + (f" (defaults applied: {', '.join(defaulted)})" if defaulted else "") + note)


def _labels_shown(schema: Mapping[str, Any], reveal: Reveal) -> dict[str, Any]:
    """*schema* with hidden characters made visible in every title and description."""
    properties = {}
    for name, prop in schema["properties"].items():
        properties[name] = {k: (reveal(v) if k in ("title", "description") else v)
                            for k, v in prop.items()}
    return {**schema, "properties": properties}
