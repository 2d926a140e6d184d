"""Structured decoding in each server's spelling (``ServerKind.constrain``)."""

from __future__ import annotations

from typing import Any

import pytest

from populace.llm import MockTransport, OpenAIModel, Response, server_kind

SCHEMA = {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]}
JSON = {"type": "json_schema", "json_schema": {"name": "guess", "schema": SCHEMA}}
REGEX = {"type": "regex", "regex": "[0-9]+"}
CHOICE = {"type": "choice", "choice": ["yes", "no"]}


def spelt(response_format: dict[str, Any], server: str) -> dict[str, Any]:
    body: dict[str, Any] = {}
    server_kind(server).constrain(body, response_format)
    return body


@pytest.mark.parametrize(("server", "json", "regex", "choice"), [
    ("auto", {"response_format": JSON}, {}, {}),
    ("openai", {"response_format": {"type": "json_schema", "json_schema": {
        "strict": True, "name": "guess", "schema": SCHEMA}}}, {}, {}),
    ("vllm", {"structured_outputs": {"json": SCHEMA}}, {"structured_outputs": {"regex": "[0-9]+"}},
     {"structured_outputs": {"choice": ["yes", "no"]}}),
    ("populace", {"structured_outputs": {"json": SCHEMA}},
     {"structured_outputs": {"regex": "[0-9]+"}},
     {"structured_outputs": {"choice": ["yes", "no"]}}),
    ("sglang", {"response_format": JSON}, {"regex": "[0-9]+"}, {"regex": "(yes|no)"}),
    ("llamacpp", {"json_schema": SCHEMA}, {}, {"grammar": 'root ::= "yes" | "no"'}),
])
def test_each_server_gets_its_own_spelling(server: str, json: dict[str, Any],
                                           regex: dict[str, Any],
                                           choice: dict[str, Any]) -> None:
    assert spelt(JSON, server) == json
    assert spelt(REGEX, server) == regex  # not sent where the server cannot hold to one
    assert spelt(CHOICE, server) == choice
    assert spelt({"type": "json_object"}, server) == {"response_format": {"type": "json_object"}}


def test_sglang_choices_are_escaped() -> None:
    assert spelt({"type": "choice", "choice": ["1.5", "a|b"]}, "sglang") == {
        "regex": r"(1\.5|a\|b)"}


async def test_openai_gets_a_prompt_cache_key_shared_by_an_agents_calls() -> None:
    def answer(url: str, body: dict[str, Any]) -> Response:
        return Response.json({"choices": [{"message": {"content": "7"}}]})

    transport = MockTransport(answer)
    model = OpenAIModel("m", model="gpt", base_urls="https://api.openai.com/v1",
                        server="openai", transport=transport)
    head = [{"role": "system", "content": "Rules."}, {"role": "system", "content": "You: Ann"}]
    await model.complete([*head, {"role": "user", "content": "Round 1"}])
    await model.complete([*head, {"role": "assistant", "content": "7"},
                          {"role": "user", "content": "Round 2"}])
    await model.complete([head[0], {"role": "user", "content": "Round 1"}])
    keys = [body["prompt_cache_key"] for _, body, _ in transport.requests]
    assert keys[0] == keys[1] != keys[2]
    await model.aclose()
    plain = MockTransport(answer)
    other = OpenAIModel("m", model="m", base_urls="http://vllm:8000/v1", transport=plain)
    await other.complete([*head, {"role": "user", "content": "Round 1"}])
    assert "prompt_cache_key" not in plain.requests[0][1]  # other servers may refuse it
    await other.aclose()
