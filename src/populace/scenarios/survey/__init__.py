"""A questionnaire answered by every persona of a population (``scenario: survey``).

"Silicon sampling" and survey experiments: questions of five types (single and multiple
choice, Likert scales, numbers, open answers coded into categories), skip logic, option
order shuffled per respondent, several waves, treatment arms with exact (stratified)
assignment. Answers go to the ``answers`` table; ``populace report`` draws marginals,
cross-tabs, treatment effects with confidence intervals, position bias and the distance to
a published reference. See ``docs/survey.md``.
"""

from ._agents import Plan, Respondent
from ._analysis import (
    compare_reference,
    crosstab,
    marginals,
    numeric_summary,
    position_bias,
    rake,
    read_reference,
    report_tables,
    treatment_effects,
)
from ._questionnaire import Arm, Question, Questionnaire, Treatments, load_questionnaire
from ._scenario import ANSWER_SCHEMA, Survey, SurveyConfig, assign_arms, decode

__all__ = [
    "ANSWER_SCHEMA",
    "Arm",
    "Plan",
    "Question",
    "Questionnaire",
    "Respondent",
    "Survey",
    "SurveyConfig",
    "Treatments",
    "assign_arms",
    "compare_reference",
    "crosstab",
    "decode",
    "load_questionnaire",
    "marginals",
    "numeric_summary",
    "position_bias",
    "rake",
    "read_reference",
    "report_tables",
    "treatment_effects",
]
