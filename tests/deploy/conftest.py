"""The chart rendered once per session for every value set: each test reads these objects."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.chart import objects, render
from tests.deploy.value_sets import VALUE_SETS


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: objects(render(values)) for name, values in VALUE_SETS.items()}
