"""Shared helpers of the provider adapters: reading untrusted payloads with a field path.

Every reader raises :class:`~anfitrion.exceptions.AdapterError` naming the path of the bad
field (``choices[0].message.tool_calls[1].id``), so a malformed payload fails with one
documented error and nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .._conversation import Message, Reply, ToolCall, ToolResult, UserMessage
from ..exceptions import AdapterError, ModelError, map_exceptions

__all__ = ["Reader", "as_dict", "details_of", "interleave", "ordered_results", "sdk_errors"]


def as_dict(value: Any) -> Any:
    """An SDK response object as the JSON the server sent (fields it did not send left out)."""
    to_dict = getattr(value, "to_dict", None)
    return to_dict(mode="json") if callable(to_dict) else value


@contextmanager
def sdk_errors(error_type: type[BaseException], provider: str) -> Iterator[None]:
    """Translate the SDK's own errors (HTTP status, connection, timeout) into ModelError,
    keeping the HTTP status the provider answered with (``status_code``, when there was one)."""

    def model_error(exc: BaseException, message: str) -> ModelError:
        status = getattr(exc, "status_code", None)  # the SDKs' APIStatusError carries it
        code = status if isinstance(status, int) and not isinstance(status, bool) else None
        return ModelError(message, provider=provider, status_code=code)

    with map_exceptions({error_type: model_error}, provider):
        yield


class Reader:
    """Typed access to a JSON payload of one provider, raising :class:`AdapterError`."""

    def __init__(self, provider: str) -> None:
        self.provider = provider

    def error(self, message: str, path: str) -> AdapterError:
        return AdapterError(message, path=path, provider=self.provider)

    def obj(self, value: object, path: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(f"expected an object, got {_type(value)}", path or "(body)")
        return value

    def array(self, value: object, path: str) -> Sequence[Any]:
        if not isinstance(value, list):
            raise self.error(f"expected an array, got {_type(value)}", path)
        return value

    def string(self, d: Mapping[str, Any], key: str, path: str, *,
               nonempty: bool = False) -> str:
        where = _join(path, key)
        if key not in d:
            raise self.error("missing", where)
        value = d[key]
        if not isinstance(value, str):
            raise self.error(f"expected a string, got {_type(value)}", where)
        if nonempty and not value:
            raise self.error("must not be empty", where)
        return value

    def opt_string(self, d: Mapping[str, Any], key: str, path: str) -> str | None:
        value = d.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(f"expected a string, got {_type(value)}", _join(path, key))
        return value

    def opt_int(self, d: Mapping[str, Any], key: str, path: str) -> int:
        """An optional token count: missing or null is 0."""
        value = d.get(key)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.error(f"expected a non-negative integer, got {_type(value)}",
                             _join(path, key))
        return value

    def opt_obj(self, d: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
        value = d.get(key)
        if value is None:
            return None
        return self.obj(value, _join(path, key))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def details_of(part: ToolCall | Reply, key: str) -> Mapping[str, Any]:
    """The provider details stored under *key* (one namespace per wire format)."""
    details = part.provider_details or {}
    found = details.get(key)
    return found if isinstance(found, Mapping) else {}


def interleave(items: list[Any], extras: object) -> list[Any]:
    """Put back provider-only items (reasoning, thinking) at the positions they came from.

    *extras* is a list of ``{"before": n, "item": {...}}``: the item stood before the n-th
    canonical part (``n == len(parts)``: at the end).
    """
    if not isinstance(extras, list) or not extras:
        return items
    out: list[Any] = []
    # Stored details are data from outside: entries without a position are not guessed at.
    pending = sorted((e for e in extras if isinstance(e, Mapping) and "item" in e
                      and isinstance(e.get("before"), int) and not isinstance(e["before"], bool)),
                     key=lambda e: int(e["before"]))
    k = 0
    for index, item in enumerate(items):
        while k < len(pending) and int(pending[k]["before"]) <= index:
            out.append(pending[k]["item"])
            k += 1
        out.append(item)
    out.extend(e["item"] for e in pending[k:])
    return out


def ordered_results(messages: Sequence[Message], provider: str) -> list[tuple[ToolResult, ...]]:
    """For each message, its tool results in the order of the calls they answer.

    Checks the pairing the wire formats require: every result answers a call of the reply
    just before it, no call id is answered twice, and a reply's calls are all answered before
    the conversation goes on.

    Raises:
        AdapterError: a result for an unknown call id, a duplicate, or an unanswered call.
    """
    out: list[tuple[ToolResult, ...]] = []
    calls: tuple[ToolCall, ...] = ()
    for m, message in enumerate(messages):
        if isinstance(message, Reply):
            if calls:
                raise AdapterError(f"the calls {', '.join(c.id for c in calls)} have no "
                                   "results before the next reply",
                                   path=f"messages[{m}]", provider=provider)
            calls = message.tool_calls
            out.append(())
            continue
        results = [p for p in message.parts if isinstance(p, ToolResult)]
        order = {c.id: i for i, c in enumerate(calls)}
        seen: set[str] = set()
        for p, part in enumerate(message.parts):
            if not isinstance(part, ToolResult):
                continue
            if part.call_id not in order:
                raise AdapterError(f"result for unknown call id {part.call_id!r}",
                                   path=f"messages[{m}].parts[{p}].call_id", provider=provider)
            if part.call_id in seen:
                raise AdapterError(f"two results for call id {part.call_id!r}",
                                   path=f"messages[{m}].parts[{p}].call_id", provider=provider)
            seen.add(part.call_id)
        if results:
            missing = [c.id for c in calls if c.id not in seen]
            if missing:
                raise AdapterError(f"no result for call ids {', '.join(missing)}",
                                   path=f"messages[{m}]", provider=provider)
            calls = ()
        elif calls and isinstance(message, UserMessage):
            raise AdapterError(f"the calls {', '.join(c.id for c in calls)} have no results",
                               path=f"messages[{m}]", provider=provider)
        out.append(tuple(sorted(results, key=lambda r: order[r.call_id])))
    return out
