"""GBNF grammars that steer the local model: call or text, which tool, and its arguments.

A small model left free to write a tool call gets the format wrong more often than not; a grammar
makes every sampled token keep the output well-formed. The grammar only narrows the form: the
host's gate still validates every call, because a client may ask for loose arguments and a
grammar is not a security control.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

from ._chatml import CALL_OPEN

__all__ = ["DECIDE", "ArgumentMode", "arguments_grammar", "name_grammar"]

log = logging.getLogger("anfitrion.models.local")

ArgumentMode: TypeAlias = Literal["schema", "json"]
"""``schema``: the arguments must match the tool's JSON Schema; ``json``: any JSON object."""

DECIDE = f'root ::= {json.dumps(CALL_OPEN)} | text\ntext ::= [^<] .*\n'
"""The first tokens of a reply: either the opening of a tool call or text that does not start
with ``<``. The model's own preference picks the branch; the grammar only removes the
malformed middle ground (prose about a call, a half-written tag)."""

_ANY_OBJECT: Mapping[str, Any] = {"type": "object"}


def name_grammar(names: Sequence[str]) -> str:
    """Exactly one of *names*, then the closing quote (so no name is a prefix of another)."""
    if not names:
        raise ValueError("no tool names to choose from")
    choices = " | ".join(json.dumps(name) for name in names)
    return f'root ::= ({choices}) "\\""\n'


def arguments_grammar(schema: Mapping[str, Any], mode: ArgumentMode = "schema") -> str:
    """A grammar for the arguments object of a tool.

    In ``schema`` mode it is derived from the tool's JSON Schema by llama-cpp-python's
    converter; keywords the converter cannot express fall back to "any JSON object" (the gate
    checks the schema anyway). In ``json`` mode the model may write any object, as it could with
    a server that has no grammar support: extra keys, wrong types.
    """
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    target = schema if mode == "schema" else _ANY_OBJECT
    try:
        grammar: str = json_schema_to_gbnf(json.dumps(target))
    except (ValueError, KeyError, TypeError, NotImplementedError, RecursionError) as exc:
        log.warning("cannot turn a tool schema into a grammar (%s); allowing any JSON object",
                    exc)
        grammar = json_schema_to_gbnf(json.dumps(_ANY_OBJECT))
    return grammar
