"""The game's environment: the moderator's announcements and, in group play, the groups.

The global environment ``game`` holds what everybody may know once a round ends (round,
mean, target, winning number, the announcement text). In group-level play each group has
its own environment below it (``game/group-3``) holding the group's report; a participant
reads through its group's environment, so it sees the global announcement (reads fall
through) and its own group's report, never another group's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from populace.environment import Env, EnvEvent, EnvService, Op, RemoteEnvService

from ._rules import GroupScores, RoundOutcome

ROOT = "game"
#: Keys of the global environment, monitored so that run statistics (the studio) show them.
ANNOUNCED = ("round", "mean", "target", "winner_number", "announcement")
#: Group reports shown live as well, for the first this many groups.
MONITORED_GROUPS = 16


def group_path(group: int) -> str:
    return f"{ROOT}/group-{group}"


def build_world(groups: Iterable[int] | None) -> Env:
    """The environment tree before round 1; ``groups``: the group ids in group play."""
    world = Env(ROOT)
    for key in ANNOUNCED:
        world.register(key, "" if key == "announcement" else None, owner="moderator")
    world.register("winners", [], owner="moderator")  # every round's winning number so far
    if groups is not None:
        world.register("winner_group", None, owner="moderator")
        for g in groups:
            world.child(f"group-{g}").register("report", None, owner="moderator")
    return world


def announcement(outcome: RoundOutcome, scores: GroupScores | None) -> str:
    """What the moderator tells everybody when a round is over."""
    if outcome.target is None or outcome.winner_number is None:
        return f"Round {outcome.round} is over. No valid number was given."
    text = (f"Round {outcome.round} is over. The target was {outcome.target:.2f} and the "
            f"winning number was {outcome.winner_number:g}")
    if scores is not None:
        return text + f" (the average of group {scores.winner_group})."
    return text + "."


def publish(outcome: RoundOutcome, scores: GroupScores | None) -> list[Op]:
    """The operations that make a round's outcome known, as one batch."""
    ops = [Op.set("round", outcome.round), Op.set("mean", outcome.mean),
           Op.set("target", outcome.target), Op.set("winner_number", outcome.winner_number),
           Op.set("announcement", announcement(outcome, scores)),
           Op.append("winners", outcome.winner_number)]
    if scores is not None:
        ops.append(Op.set("winner_group", scores.winner_group))
        for g, report in zip(scores.group_ids.tolist(), scores.reports.tolist(), strict=True):
            ops.append(Op.set("report", None if np.isnan(report) else report,
                              env=group_path(g)))
    return ops


def _shown(event: EnvEvent) -> None:
    """A listener that only marks its key as monitored: statistics carry the value."""


async def monitor_world(service: EnvService | RemoteEnvService,
                        groups: Iterable[int] | None) -> None:
    """Monitor the announced keys (and the first groups' reports) for run statistics."""
    for key in ANNOUNCED:
        await service.monitor(_shown, key=key)
    if groups is not None:
        await service.monitor(_shown, key="winner_group")
        for g in list(groups)[:MONITORED_GROUPS]:
            await service.monitor(_shown, key="report", env=group_path(g))


async def monitored_values(service: EnvService | RemoteEnvService) -> dict[str, Any]:
    stats = await service.fetch_statistics()
    return stats.env.all_monitored()
