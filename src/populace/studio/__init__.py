"""Populace Studio: watch, browse and manage runs from a web browser.

``populace studio`` serves it; ``populace run CONFIG --studio`` serves it beside one run.
The live page reads a run's :class:`~populace.results.RunMonitor` snapshot (aggregates only,
a few kilobytes at any scale) twice a second over server-sent events; the agent browser
reads the run directory. The page is plain HTML, CSS and JavaScript shipped in
``static/``: no front-end build step.
"""

from ._agents import AgentBrowser, AgentQueryError, UnknownAgent
from ._app import create_app
from ._runs import LiveRun, NotFound, Refused, Runs
from ._security import is_loopback, new_token
from ._server import StudioServer

__all__ = [
    "AgentBrowser",
    "AgentQueryError",
    "LiveRun",
    "NotFound",
    "Refused",
    "Runs",
    "StudioServer",
    "UnknownAgent",
    "create_app",
    "is_loopback",
    "new_token",
]
