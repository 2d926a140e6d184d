"""Model clients for tests that a run file names with ``provider: python``
(``factory: fault_models:Brittle``): ``tests/`` is on the import path."""

from __future__ import annotations

from populace.core import derive_seed, seed_for
from populace.llm import Completion, ModelClient, Request

#: Agent id modulo 6 → what its model does instead of answering.
FAILURES: dict[int, BaseException] = {
    1: ZeroDivisionError("division by zero"),
    2: KeyError("missing"),
    3: RuntimeError("the model fell over"),
}


class Brittle(ModelClient):
    """Answers ``agent id + round``, or raises ``FAILURES[agent % 6]`` (a bug in a model,
    not a :class:`~populace.core.ModelError`)."""

    def __init__(self, name: str, *, agents: int, rounds: int, seed: int) -> None:
        self.name = name
        self.who = {seed_for(derive_seed(seed, r), a): (a, r)
                    for a in range(agents) for r in range(1, rounds + 1)}

    async def send(self, request: Request) -> Completion:
        assert request.seed is not None
        agent, round_no = self.who[request.seed]
        failure = FAILURES.get(agent % 6)
        if failure is not None:
            raise failure
        return Completion(f"I pick {agent + round_no}", self.name)
