"""Canonical conversations shared by the adapter tests (one per situation the issue names)."""

from __future__ import annotations

from typing import Literal

from anfitrion._conversation import Reply, StopReason, Text, ToolCall, ToolResult, UserMessage
from anfitrion._tools import Effect, Tool, ToolDefinition
from anfitrion.models._base import ModelRequest


def get_weather(location: str,
                units: Literal["celsius", "fahrenheit"] = "celsius") -> dict[str, object]:
    """Get the current weather for a given location.

    Args:
        location: City and country, e.g. "Lisboa, PT".
        units: Temperature units.
    """
    return {"location": location}


def save_note(path: str, text: str) -> str:
    """Save a short note for the team under drafts/. Use only when asked to save a note.

    Args:
        path: Where to save it, e.g. "drafts/weather.md".
        text: The note's text.
    """
    return path


WEATHER: ToolDefinition = Tool.from_function(get_weather, effect=Effect.READ).definition
SAVE_NOTE: ToolDefinition = Tool.from_function(save_note).definition

ASK = UserMessage((Text("Weather in Lisboa?"),))
CALL_LISBOA = ToolCall.from_object("call_1", "get_weather", {"location": "Lisboa, PT"})
CALL_PORTO = ToolCall.from_object("call_2", "get_weather",
                                  {"location": "Porto, PT", "units": "celsius"})
RESULT_LISBOA = ToolResult("call_1", "get_weather",
                           '{"location": "Lisboa, PT", "temp_c": 15, "sky": "partly cloudy"}')
RESULT_PORTO = ToolResult("call_2", "get_weather",
                          '{"location": "Porto, PT", "temp_c": 17, "sky": "partly cloudy"}')


def one_tool() -> ModelRequest:
    return ModelRequest([ASK], [WEATHER])


def several_tools() -> ModelRequest:
    return ModelRequest([UserMessage((Text("Save a note about the weather."),))],
                        [WEATHER, SAVE_NOTE], instructions="You are a careful assistant.",
                        tool_choice="required")


def parallel_calls() -> ModelRequest:
    """Two calls in one reply; the results arrive out of call order in the canonical message."""
    reply = Reply((Text("Checking both."), CALL_LISBOA, CALL_PORTO), StopReason.TOOL_USE)
    return ModelRequest([UserMessage((Text("Weather in Lisboa and Porto?"),)), reply,
                         UserMessage((RESULT_PORTO, RESULT_LISBOA))], [WEATHER])


def error_results() -> ModelRequest:
    bad = ToolCall.from_object("call_3", "delete_file", {"path": "notes.txt"})
    kelvin = ToolCall.from_object("call_4", "get_weather", {"location": "Porto, PT",
                                                            "units": "kelvin"})
    reply = Reply((bad, kelvin), StopReason.TOOL_USE)
    results = UserMessage((
        ToolResult("call_3", "delete_file", "unknown tool 'delete_file': it is not one of the "
                   "tools offered (get_weather)", is_error=True, error_kind="unknown_tool"),
        ToolResult("call_4", "get_weather", "units: 'kelvin' is not one of ['celsius', "
                   "'fahrenheit']", is_error=True, error_kind="invalid_arguments")))
    return ModelRequest([UserMessage((Text("Delete notes.txt, then Porto in kelvin."),)),
                         reply, results], [WEATHER])


def long_multi_turn() -> ModelRequest:
    messages = [
        ASK,
        Reply((CALL_LISBOA,), StopReason.TOOL_USE),
        UserMessage((RESULT_LISBOA,)),
        Reply((Text("It is 15 °C and partly cloudy in Lisboa."),)),
        UserMessage((Text("And Porto?"),)),
        Reply((CALL_PORTO,), StopReason.TOOL_USE),
        UserMessage((RESULT_PORTO,)),
        Reply((Text("17 °C in Porto."),)),
        UserMessage((Text("Save a note with both."),)),
        Reply((Text("Saving."), ToolCall.from_object(
            "call_5", "save_note", {"path": "drafts/weather.md",
                                    "text": "Lisboa 15 °C, Porto 17 °C."})),
              StopReason.TOOL_USE),
        UserMessage((ToolResult("call_5", "save_note", "saved 26 characters to "
                                "drafts/weather.md"),)),
    ]
    return ModelRequest(messages, [WEATHER, SAVE_NOTE], instructions="Be brief.")


SCENARIOS = {"one_tool": one_tool, "several_tools": several_tools,
             "parallel_calls": parallel_calls, "error_results": error_results,
             "long_multi_turn": long_multi_turn}
