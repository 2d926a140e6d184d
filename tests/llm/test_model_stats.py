"""ModelStats carry per-endpoint counters, so that the studio can show every server."""

from __future__ import annotations

from populace.llm import DummyModel, OpenAIModel


def test_openai_statistics_list_every_endpoint() -> None:
    model = OpenAIModel("q", model="m", base_urls=["http://127.0.0.1:9/v1",
                                                    "http://127.0.0.1:10/v1/"])
    stats = model.statistics()
    assert [e.url for e in stats.endpoints] == ["http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1"]
    assert all(e.state == "up" and e.requests == 0 for e in stats.endpoints)
    assert stats.endpoints == model.endpoint_statistics()


def test_clients_without_endpoints_have_none() -> None:
    assert DummyModel().statistics().endpoints == ()
