"""``python -m anfitrion.localmodel``: serve the local model, run the demo with it, measure it.

    python -m anfitrion.localmodel serve --port 8080   # an endpoint for any OpenAI client
    python -m anfitrion.localmodel demo                # the demo scenario, real model
    python -m anfitrion.localmodel bench               # tokens/s, s per tool call, RSS
"""

from __future__ import annotations

import contextlib
import json
import resource
import statistics
import sys
import threading
import time
import urllib.request
from typing import Any

import click

from . import LocalServer, find_model_file, local_model

_BENCH_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather for a given location.",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": 'City and country, e.g. "Lisboa, PT".'}},
            "required": ["location"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "save_note", "description": "Save a short note for the team under drafts/.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "text": {"type": "string"}},
            "required": ["path", "text"], "additionalProperties": False}}},
]
_BENCH_PROMPTS = ("Weather in Lisboa?", "What is the weather like in Porto today?",
                  "How hot is it in Madrid right now?", "What's the weather in Lisboa, PT?",
                  "Save a note for the team: Lisboa 15 °C, partly cloudy.")


_DEMO_SCENES: tuple[tuple[str, str], ...] = (
    ("A read tool, allowed by default", "Weather in Lisboa?"),
    ("A request no tool serves (a small model may call one anyway)", "Please delete notes.txt."),
    ("A value the schema does not offer (kelvin)", "What is the weather in Porto, in kelvin?"),
    ("A write tool that needs a person's approval",
     "Save a note for the team: Lisboa 15 °C, partly cloudy."),
)


@click.group()
def main() -> None:
    """The local model (SmolLM2-135M, llama.cpp, one thread) on this machine."""


@main.command()
@click.option("--model", "name", default="smollm2", show_default=True,
              help="A known model name or the path of a .gguf file.")
@click.option("--port", default=8080, show_default=True, help="Port on 127.0.0.1.")
@click.option("--api-key", default=None, help="Bearer key clients must send (random if unset).")
def serve(name: str, port: int, api_key: str | None) -> None:
    """Serve an OpenAI-compatible Chat Completions endpoint on 127.0.0.1 until interrupted."""
    server = LocalServer(find_model_file(name), model_name=name if not name.endswith(".gguf")
                         else "local", port=port, api_key=api_key).start()
    click.echo(f"base_url={server.base_url}\napi_key={server.api_key}\nmodel={server.model_name}")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


@main.command()
@click.option("--approve/--no-approve", default=None,
              help="Ask on the terminal (default when stdin is a TTY) or deny writes.")
def demo(approve: bool | None) -> None:
    """The demo scenario of ``anfitrion demo``, with the real local model instead of a script."""
    import anyio

    from .._approvals import Approver, DenyAllApprover
    from .._cli.demo import DemoPrinter
    from .._cli.terminal import TerminalApprover
    from .._demo import demo_toolbox
    from .._host import Host

    interactive = sys.stdin.isatty() if approve is None else approve
    approver: Approver = TerminalApprover() if interactive else DenyAllApprover()
    host = Host(model=local_model("smollm2"), tools=demo_toolbox(), approver=approver,
                listeners=[DemoPrinter()], max_turns=4, note_unperformed=True)

    async def run() -> None:
        for number, (title, prompt) in enumerate(_DEMO_SCENES, 1):
            click.echo(click.style(f"\n{number}. {title}", bold=True))
            click.echo(f"user: {prompt}")
            # one session per scene: a 135M model copies its previous turns when it can
            result = await host.run(prompt, principal="demo-user")
            click.echo(f"final: {result.output}" if result.output
                       else f"status: {result.status.value}")
            if result.report():  # what ran, by the host: a small model's answer may claim more
                click.echo(result.report())

    anyio.run(run)


def _post(server: LocalServer, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions", json.dumps(body).encode(),
        {"Authorization": f"Bearer {server.api_key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:  # loopback only
        result: dict[str, Any] = json.loads(response.read())
    return result


@main.command()
@click.option("--rounds", default=2, show_default=True, help="Passes over the prompts.")
def bench(rounds: int) -> None:
    """Measure load time, tokens/s, seconds per tool-call request and peak RSS (JSON)."""
    started = time.perf_counter()
    with LocalServer(find_model_file("smollm2")) as server:
        load = time.perf_counter() - started
        rates = []
        for _ in range(rounds):
            begin = time.perf_counter()
            text = _post(server, {"messages": [{"role": "user", "content":
                                                "Tell me a long story about a lighthouse."}],
                                  "max_tokens": 128})
            rates.append(text["usage"]["completion_tokens"] / (time.perf_counter() - begin))
        seconds, calls, parsed = [], 0, 0
        for _ in range(rounds):
            for prompt in _BENCH_PROMPTS:
                begin = time.perf_counter()
                reply = _post(server, {"messages": [{"role": "user", "content": prompt}],
                                       "tools": _BENCH_TOOLS})
                seconds.append(time.perf_counter() - begin)
                for call in reply["choices"][0]["message"].get("tool_calls") or []:
                    calls += 1
                    with contextlib.suppress(ValueError):
                        parsed += isinstance(json.loads(call["function"]["arguments"]), dict)
    click.echo(json.dumps({
        "load_seconds": round(load, 2),
        "text_tokens_per_second": round(statistics.median(rates), 1),
        "tool_call_request_seconds_median": round(statistics.median(seconds), 2),
        "tool_call_request_seconds_max": round(max(seconds), 2),
        "requests": len(seconds), "replies_with_tool_calls": calls,
        "tool_calls_with_parseable_arguments": parsed,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }, indent=2))


if __name__ == "__main__":
    main()
