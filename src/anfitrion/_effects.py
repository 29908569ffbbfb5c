"""Effect identity: what makes two write calls the *same* side effect.

The execution ledger runs a *call* (session, call id) at most once; a model could still run an
effect twice by proposing it again under a new call id. Every WRITE tool therefore has an
**effect key**, reserved in the store in the same transaction as the call's claim
(:meth:`~anfitrion.store.Store.claim_execution`): a second call with the same key is not run
silently.

By default the key is the tool's name and its canonical arguments, scoped to the principal and
the session. A tool may declare its own template over its top-level arguments, and how wide it
holds::

    Tool(..., effect_key="refund:{payment_id}", effect_scope="principal")

The key stored is the SHA-256 of the canonical JSON of ``[scope, scope ids, template, values]``:
values are JSON values, never pasted into a string, so no argument (huge, look-alike unicode,
containing separators or braces) can make two different effects share a key. The template
rendered with its values (capped) is kept for people to read.

Arguments equal under the tool's own schema are one effect: the key is computed over them
with the schema's defaults applied and numbers in one spelling (``1``, ``1.0`` and ``1e0``
are one amount); strings are compared as written (:mod:`anfitrion._effect_arguments` says
why).
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ._canonical import canonical_json, digest
from ._effect_arguments import normalised_arguments
from .exceptions import ToolDefinitionError

__all__ = ["DISPLAY_CHARS", "EffectKey", "EffectScope", "check_effect_template", "effect_key"]

DISPLAY_CHARS = 200
"""How much of the rendered key is kept for display."""


class EffectScope(StrEnum):
    SESSION = "session"
    """The same principal in the same session (the default)."""
    PRINCIPAL = "principal"
    """The same principal, in any session."""
    GLOBAL = "global"
    """Anyone, anywhere (e.g. a payment id that is unique in the outside world)."""


@dataclass(frozen=True, slots=True)
class EffectKey:
    """The identity of one side effect: ``key`` is what the store reserves."""

    key: str
    display: str
    scope: EffectScope
    tool: str
    arguments: Mapping[str, Any] | None = field(default=None, compare=False)
    """The call's validated arguments, kept with the reservation for a later reconcile."""
    sensitive: frozenset[str] = field(default=frozenset(), compare=False)
    """The names of *arguments* the tool declares sensitive."""


def check_effect_template(tool: str, template: str, properties: Mapping[str, Any]) -> None:
    """Refuse a template that is not plain ``{argument}`` fields over declared arguments.

    Raises:
        ToolDefinitionError: a field with attribute access, an index, a format spec or a
            conversion, an argument the schema does not declare, or no field at all.
    """
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ToolDefinitionError(f"tool {tool!r}: effect_key {template!r}: {exc}") from None
    fields = [p[1] for p in parts if p[1] is not None]
    if not fields:
        raise ToolDefinitionError(f"tool {tool!r}: effect_key {template!r} names no argument "
                                  "(write it as, e.g., 'refund:{payment_id}')")
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if spec or conversion or not name.isidentifier():
            raise ToolDefinitionError(f"tool {tool!r}: effect_key {template!r}: only plain "
                                      "{argument} fields are allowed")
        if name not in properties:
            raise ToolDefinitionError(f"tool {tool!r}: effect_key {template!r} names "
                                      f"{name!r}, which is not one of its arguments")


def _fields(template: str) -> list[str]:
    return [p[1] for p in string.Formatter().parse(template) if p[1] is not None]


def effect_key(*, tool: str, arguments: Mapping[str, Any], principal_id: str,
               session_id: str, template: str | None = None,
               scope: EffectScope | str = EffectScope.SESSION,
               sensitive: frozenset[str] = frozenset(),
               schema: Mapping[str, Any] | None = None) -> EffectKey:
    """The effect key of a call of *tool* with *arguments* (already validated).

    With the tool's input *schema*, the key is computed over the arguments as the schema
    reads them (defaults applied, integral numbers as integers; strings as written): see
    :mod:`anfitrion._effect_arguments`. The arguments kept with the key are the call's own.

    >>> k = effect_key(tool="refund", arguments={"payment_id": "p1", "note": "x"},
    ...                principal_id="alice", session_id="s1", template="refund:{payment_id}",
    ...                scope="principal")
    >>> k.display, len(k.key)
    ('refund:"p1"', 64)
    """
    scope = EffectScope(scope)
    scope_ids: list[str] = {EffectScope.SESSION: [principal_id, session_id],
                            EffectScope.PRINCIPAL: [principal_id],
                            EffectScope.GLOBAL: []}[scope]
    kept = dict(arguments)
    arguments = normalised_arguments(schema, kept) if schema is not None else kept
    if template is None:
        values: list[Any] = [dict(arguments)]
        shape = f"{tool}(*)"
        display = f"{tool}({canonical_json(dict(arguments))})"
    else:
        names = _fields(template)
        values = [arguments.get(name) for name in names]
        # the tool's name is part of the identity: two tools' templates never share keys
        shape = f"{tool}:{template}"
        rendered = {name: canonical_json(arguments.get(name)) for name in names}
        display = template.format_map(rendered)
    if len(display) > DISPLAY_CHARS:
        display = display[:DISPLAY_CHARS] + "…"
    key = digest([scope.value, scope_ids, shape, values])
    return EffectKey(key, display, scope, tool, kept, frozenset(sensitive))
