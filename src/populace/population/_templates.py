"""Shipped aspect templates: ready-made categorical distributions a config names by key.

``education: {template: education}`` takes the percentages below; ``weights:``,
``percentages:`` or ``values:`` given next to ``template:`` replace them entirely (a template
then only documents where the aspect came from). The figures are rough world shares for
adults, rounded; they are defaults to start from, not demographic data to cite.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

_AGE = {
    "18-24": 13.0,
    "25-34": 21.0,
    "35-44": 19.0,
    "45-54": 17.0,
    "55-64": 14.0,
    "65+": 16.0,
}

_GENDER = {
    "female": 49.5,
    "male": 49.5,
    "non-binary": 1.0,
}

_EDUCATION = {
    "primary school": 30.0,
    "high school": 40.0,
    "bachelor's degree": 20.0,
    "master's degree": 8.0,
    "doctorate": 2.0,
}

_OCCUPATION = {
    "farmer": 11.0,
    "factory worker": 9.0,
    "construction worker": 6.0,
    "shop assistant": 8.0,
    "office clerk": 7.0,
    "driver": 5.0,
    "cook": 5.0,
    "teacher": 4.0,
    "nurse": 3.0,
    "engineer": 3.0,
    "physician": 1.0,
    "accountant": 2.0,
    "small business owner": 7.0,
    "manager": 4.0,
    "homemaker": 6.0,
    "student": 7.0,
    "retiree": 8.0,
    "unemployed": 4.0,
}

# The 30 most populous countries, shares of their combined population.
_NATIONALITY = {
    "Indian": 23.3,
    "Chinese": 23.0,
    "American": 5.5,
    "Indonesian": 4.5,
    "Pakistani": 3.9,
    "Nigerian": 3.6,
    "Brazilian": 3.5,
    "Bangladeshi": 2.8,
    "Russian": 2.3,
    "Mexican": 2.1,
    "Ethiopian": 2.1,
    "Japanese": 2.0,
    "Filipino": 1.9,
    "Egyptian": 1.8,
    "Congolese": 1.7,
    "Vietnamese": 1.6,
    "Iranian": 1.5,
    "Turkish": 1.4,
    "German": 1.4,
    "Thai": 1.2,
    "British": 1.1,
    "French": 1.1,
    "South African": 1.0,
    "Italian": 1.0,
    "Kenyan": 0.9,
    "South Korean": 0.8,
    "Colombian": 0.8,
    "Spanish": 0.8,
    "Argentine": 0.8,
    "Canadian": 0.6,
}

#: Template name → percentages per value (each sums to 100).
TEMPLATES: Mapping[str, Mapping[str, float]] = MappingProxyType({
    "age": MappingProxyType(_AGE),
    "gender": MappingProxyType(_GENDER),
    "education": MappingProxyType(_EDUCATION),
    "occupation": MappingProxyType(_OCCUPATION),
    "nationality": MappingProxyType(_NATIONALITY),
})
