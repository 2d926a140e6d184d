"""The meta-prompt that turns sampled attributes into a request for a background.

A meta-prompt is a Jinja2 template rendered once per agent. It sees:

``attributes``       the agent's sampled attributes, a dict (aspect name → value)
``attributes_json``  the same, as indented JSON
``agent_id``         the agent's id
``words``            the length asked for (``backgrounds.words``)
each aspect by name  e.g. ``{{ education }}`` (an aspect named like one of the four above
                     is reachable only through ``attributes``)

Undefined names are errors, caught when the config is loaded (for aspect names and the
fixed variables) or before the first request is sent.
"""

from __future__ import annotations

from typing import Any

import jinja2
import jinja2.meta

#: Names every meta-prompt may use besides the aspect names.
TEMPLATE_VARIABLES = frozenset({"attributes", "attributes_json", "agent_id", "words"})

DEFAULT_SYSTEM_PROMPT = (
    "You create believable, specific people for social-science simulations. You answer with "
    "the requested background only: plain prose, no title, no list, no remarks about the task."
)

DEFAULT_META_PROMPT = """\
Invent one person who will act as a participant in a simulated study, and write their \
background.

These facts about the person are fixed:
{{ attributes_json }}

Build the person around those facts without listing them back. Give them a name, a place \
they come from and a place they live now, the people in their life, what an ordinary day \
looks like, a few experiences that shaped them, what they are good and bad at, what they \
care about, and how they tend to decide things: whether they calculate or follow their gut, \
how they treat risk, numbers and competition, and how much they expect from other people.

Make this person unlike anyone else who shares the same facts: give them at least one \
habit, opinion or story that is unexpected yet plausible.

Write at most {{ words }} words in the second person ("You are ..."), as one or two \
paragraphs."""

_ENV = jinja2.Environment(
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    keep_trailing_newline=False,
)


def compile_template(source: str) -> jinja2.Template:
    """A compiled meta-prompt; ValueError with the line number on a syntax error."""
    try:
        return _ENV.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"Jinja2 syntax error on line {e.lineno}: {e.message}") from None


def template_names(source: str) -> set[str]:
    """The free variables a template uses (after :func:`compile_template` accepted it)."""
    return set(jinja2.meta.find_undeclared_variables(_ENV.parse(source)))


def render(template: jinja2.Template, variables: dict[str, Any]) -> str:
    """``template`` filled with ``variables``; any failure of the template's own expressions
    (``{{ education + 1 }}`` on text) as a :class:`jinja2.TemplateError`, like an
    undefined name."""
    try:
        return template.render(variables).strip()
    except jinja2.TemplateError:
        raise
    except Exception as e:  # the user's expression: one line, not a traceback
        raise jinja2.TemplateRuntimeError(f"{type(e).__name__}: {e}") from None
