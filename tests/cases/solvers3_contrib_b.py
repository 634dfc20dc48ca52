"""Table cases for Solvers III (issue 11): filled by the family's module."""

from ..optimizer_table import OptCase

CASES: list[OptCase] = []
