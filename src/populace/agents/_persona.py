"""What a model is told about the persona it plays: declared profile columns, and a
background text when the profile has one. One rendering, used by decisions, interviews and
the studio.

Nothing is shown that ``shown`` does not name: a survey's experimental arm, a group number
or an id stays out of every prompt unless the run file asks for it.

>>> options = PersonaOptions(shown=["age", "education"])
>>> options.render({"age": 34, "education": "master", "arm": "control"})
'About you: age: 34; education: master.'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field, model_validator

from populace._strict import StrictModel
from populace.core import ConfigError

#: Profile columns that describe the run, not the persona: never shown by default.
INTERNAL = frozenset({"agent_id", "arm", "background", "group", "model"})


def persona_columns(columns: Iterable[str]) -> list[str]:
    """The columns a persona shows when none are declared: all but :data:`INTERNAL`."""
    return [c for c in columns if c not in INTERNAL]


class PersonaOptions(StrictModel):
    """How personas are shown to their models and how much they remember; a scenario's
    ``Settings`` holds one as ``persona:`` (run file: ``settings.persona``)."""

    shown: list[str] = Field(default_factory=list, description="profile columns the model "
                             "is told (none by default; never a column not named here)")
    background: str | None = Field("background", description="the profile column holding a "
                                   "written background, included when present (null: none)")
    memory_tokens: int = Field(800, ge=1, le=1_000_000, strict=True,
                               description="most tokens of memory in one call (estimated)")
    event_tokens: int = Field(120, ge=1, le=100_000, strict=True,
                              description="most tokens of one remembered event (longer "
                              "texts are cut)")
    summarise: bool = Field(True, description="when the memory outgrows its budget, the "
                            "agent's model summarises the oldest part (else it is dropped)")

    @model_validator(mode="after")
    def _budget_holds_an_event(self) -> PersonaOptions:
        if self.memory_tokens < self.event_tokens:
            raise ValueError(f"memory_tokens: {self.memory_tokens} is below one event "
                             f"(event_tokens: {self.event_tokens})")
        return self

    def check(self, columns: Iterable[str], source: str = "settings.persona") -> None:
        """Refuse, in one line, a ``shown`` column that the profiles lack."""
        have = list(columns)
        for i, name in enumerate(self.shown):
            if name not in have:
                listed = ", ".join(c for c in have if c != "agent_id") or "none"
                raise ConfigError(f"{source}.shown.{i}: no profile column {name!r} "
                                  f"(have: {listed})")

    def render(self, profile: Mapping[str, Any]) -> str:
        """The persona text of ``profile``: the shown columns, then the background."""
        parts = []
        if self.shown:
            parts.append("About you: " + "; ".join(
                f"{c}: {profile[c]}" for c in self.shown
                if profile.get(c) is not None) + ".")
        if self.background is not None:
            text = profile.get(self.background)
            if text is not None and str(text).strip():
                parts.append(str(text).strip())
        return "\n\n".join(parts)
