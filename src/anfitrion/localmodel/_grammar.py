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

from ..exceptions import UserError
from ._chatml import CALL_OPEN

__all__ = ["ANY_OBJECT", "DECIDE", "ArgumentMode", "arguments_grammar", "name_grammar"]

log = logging.getLogger("anfitrion.localmodel")

ArgumentMode: TypeAlias = Literal["schema", "open", "json"]
"""``schema``: the arguments must match the tool's JSON Schema; ``open``: the same, but keys the
schema lacks are allowed at the top level; ``json``: any JSON object."""

DECIDE = f'root ::= {json.dumps(CALL_OPEN)} | text\ntext ::= [^<] .*\n'
"""The first tokens of a reply: either the opening of a tool call or text that does not start
with ``<``. The model's own preference picks the branch; the grammar only removes the
malformed middle ground (prose about a call, a half-written tag)."""

# Any JSON object that parses: the converter's own generic grammar lets raw control characters
# into strings, which no strict JSON parser accepts.
ANY_OBJECT = r"""root ::= object
object ::= "{" ws ( member ( "," ws member )* )? "}"
member ::= string ":" ws value ws
value ::= object | array | string | number | ("true" | "false" | "null")
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
ws ::= " "?
"""


def name_grammar(names: Sequence[str]) -> str:
    """Exactly one of *names*, then the closing quote (so no name is a prefix of another)."""
    if not names:
        raise UserError("no tool names to choose from")
    choices = " | ".join(json.dumps(name) for name in names)
    return f'root ::= ({choices}) "\\""\n'


def arguments_grammar(schema: Mapping[str, Any], mode: ArgumentMode = "schema") -> str:
    """A grammar for the arguments object of a tool.

    In ``schema`` mode it is derived from the tool's JSON Schema by llama-cpp-python's
    converter; keywords the converter cannot express fall back to "any JSON object" (the gate
    checks the schema anyway). ``open`` mode lets the model add keys the schema lacks, the
    commonest mistake of real models. In ``json`` mode the model may write any object, as it
    could with a server that has no grammar support: extra keys, wrong types, missing keys.
    """
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    if mode == "json":
        return ANY_OBJECT
    if mode == "open":
        schema = {**schema, "additionalProperties": True}
    try:
        grammar: str = json_schema_to_gbnf(json.dumps(schema))
    except (ValueError, KeyError, TypeError, NotImplementedError, RecursionError) as exc:
        log.warning("cannot turn a tool schema into a grammar (%s); allowing any JSON object",
                    exc)
        return ANY_OBJECT
    return grammar
