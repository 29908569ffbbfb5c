"""Elicitation: a hostile server asks the host's person for a secret in words the old check
did not know — payment data, one-time and verification codes, passwords, API keys, recovery
phrases — or disguises the words with invisible and compatibility characters, in the message
or anywhere in the form (field names, titles, descriptions, choices). Each is refused on the
host side before anyone is asked, and the refusal (with the class) is what the audit says."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("mcp")
import mcp.types as mt

from anfitrion.mcp._elicitation import Elicitation, ElicitationAnswer, answer_elicitation

ASKS = {
    "payment card": ["Enter your card number", "Credit card to charge", "Card expiry date",
                     "The CVV on the back", "Debit card details please", "cc number"],
    "one-time or verification code": ["Enter the 6-digit code we texted you",
                                      "Verification code", "Type the SMS code",
                                      "Your authenticator code", "Confirmation code",
                                      "one-time passcode", "The code we sent to your e-mail"],
    "password": ["Your password", "Account passphrase", "Contraseña del banco",
                 "Login pwd", "Mot de passe"],
    "API key or token": ["Paste your API key", "Access token for GitHub", "Client secret",
                         "Bearer value", "Your session cookie", "Private key (PEM)"],
    "recovery phrase": ["Your wallet recovery phrase", "The 12 words of your seed",
                        "Mnemonic", "Seed phrase", "twenty-four words from the backup"],
}
ALL = [(kind, text) for kind, texts in ASKS.items() for text in texts]
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\u00ad", "\ufeff", "\u180e"]


def _full_width(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _disguise(text: str, how: int, mark: str) -> str:
    if how == 0:
        return text
    if how == 1:
        return _full_width(text)
    if how == 2:  # an invisible character inside every word
        return " ".join(w[:1] + mark + w[1:] if len(w) > 1 else w for w in text.split(" "))
    return text.upper()


def _ask(message: str, properties: dict[str, Any]) -> tuple[Any, str, list[Elicitation]]:
    asked: list[Elicitation] = []

    async def person(request: Elicitation) -> ElicitationAnswer:
        asked.append(request)
        return ElicitationAnswer("accept", dict.fromkeys(properties, "x"))

    params = mt.ElicitRequestFormParams(message=message, requested_schema={
        "type": "object", "properties": properties})
    result, detail = anyio.run(lambda: answer_elicitation("srv", params, person,
                                                          reveal=lambda t: t))
    return result, detail, asked


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(ALL), how=st.integers(0, 3), mark=st.sampled_from(INVISIBLE),
       where=st.sampled_from(["message", "name", "title", "description", "choice"]))
def test_every_class_of_secret_is_refused_wherever_and_however_it_is_written(
        case: tuple[str, str], how: int, mark: str, where: str) -> None:
    kind, text = case
    text = _disguise(text, how, mark)
    field: dict[str, Any] = {"type": "string"}
    message, name = "Please fill in the form", "value"
    if where == "message":
        message = text
    elif where == "name":
        name = text.replace(" ", "_")
    elif where == "choice":
        field["enum"] = ["none", text]
    else:
        field[where] = text
    result, detail, asked = _ask(message, {name: field})
    assert isinstance(result, mt.ErrorData), (text, where)
    assert asked == []  # nobody was asked
    assert detail.startswith("refused:")
    # the audit names the class (a disguised field name is refused as a bad name first)
    assert kind in detail or "is not [A-Za-z0-9_.-]" in detail, detail


@pytest.mark.parametrize("message", [
    "What is your name?", "Which city do you fly from?", "How many guests?",
    "Pick a date for the meeting", "Your e-mail address for the receipt",
    "Preferred seat: window or aisle?", "Zip code of the delivery address",
    "Is your name Pat?", "Choose a colour", "Describe the bug in a few words",
])
def test_ordinary_questions_still_reach_the_person(message: str) -> None:
    result, _, asked = _ask(message, {"answer": {"type": "string", "title": "Answer"}})
    assert isinstance(result, mt.ElicitResult) and len(asked) == 1
