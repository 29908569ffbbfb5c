"""The floor: a bare Python loop doing only what any host must do per call.

JSON parsing of the argument text, a compiled JSON Schema validation (fastjsonschema), a dict
dispatch to the handler and JSON serialisation of the result. Nothing else.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import fastjsonschema
from _harness import ARGS_TEXT, RESULT, TOOL_SCHEMA, Stamps


def get_weather(location: str) -> dict[str, object]:
    return {**RESULT, "location": location}


def conversation(calls: int) -> Stamps:
    stamps = Stamps()
    validate = fastjsonschema.compile(TOOL_SCHEMA)
    registry = {"get_weather": get_weather}
    results: list[str] = []
    for _ in range(calls + 1):
        stamps.stamp()
        name, text = "get_weather", ARGS_TEXT  # the "model" proposes
        arguments = json.loads(text)
        validate(arguments)
        results.append(json.dumps(registry[name](**arguments)))
    return stamps


def conversations(n: int) -> Stamps:
    """*n* one-call conversations: a fresh transcript each, one call, then the answer."""
    validate = fastjsonschema.compile(TOOL_SCHEMA)
    registry: dict[str, Callable[..., Any]] = {"get_weather": get_weather}
    stamps = Stamps()

    def one() -> None:
        transcript: list[str] = ["go"]
        stamps.stamp()
        arguments = json.loads(ARGS_TEXT)
        validate(arguments)
        transcript.append(json.dumps(registry["get_weather"](**arguments)))
        stamps.stamp()  # the second request: the model answers "done"

    one()
    started = time.process_time()
    for _ in range(n):
        one()
    stamps.total = (time.process_time() - started) * 1e6 / n
    return stamps
