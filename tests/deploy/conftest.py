"""The chart rendered once per session for every value set: each test reads these."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.chart import objects, render
from tests.deploy.value_sets import VALUE_SETS


@pytest.fixture(scope="session")
def rendered_text() -> dict[str, dict[str, str]]:
    """Value set -> template path -> manifest text, as `helm template` writes them."""
    return {name: render(values) for name, values in VALUE_SETS.items()}


@pytest.fixture(scope="session")
def rendered(rendered_text: dict[str, dict[str, str]]) -> dict[str, list[dict[str, Any]]]:
    """Value set -> every object rendered."""
    return {name: objects(text) for name, text in rendered_text.items()}
