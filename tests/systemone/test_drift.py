"""Drift between our systemone/0.2 description and published documents (read from local files)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic.json_schema import models_json_schema
from typesafe_sdk._schemas import models as sdk_models

from systemone.drift import drift
from systemone.generated.fields import STANDARD_SOURCE

OURS = (Path(__file__).resolve().parents[2] / "systemone/spec/systemone-0.2.schema.yaml").read_text(encoding="utf-8")
SDK_MODELS = Path(sdk_models.__file__).read_text(encoding="utf-8")


def openapi_from_sdk() -> dict:
    """An OpenAPI document of the same shape the API publishes, built offline from the SDK's models."""
    _, top = models_json_schema(
        [
            (m, "validation")
            for m in (
                sdk_models.SystemOneRequest,
                sdk_models.SystemOneResponse,
                sdk_models.ModelMetadataList,
                sdk_models.HTTPValidationError,
            )
        ],
        ref_template="#/components/schemas/{model}",
    )
    return {"openapi": "3.1.0", "info": {"version": "0.2.0"}, "components": {"schemas": top["$defs"]}}


def test_the_document_we_checked_against_is_the_one_installed_and_shows_no_drift() -> None:
    assert hashlib.sha256(SDK_MODELS.encode()).hexdigest() == STANDARD_SOURCE["sha256"]
    assert drift(OURS, SDK_MODELS) == []


def test_an_openapi_document_shows_no_drift() -> None:
    assert drift(OURS, json.dumps(openapi_from_sdk())) == []


def test_a_changed_published_document_is_reported_field_by_field() -> None:
    doc = openapi_from_sdk()
    schemas = doc["components"]["schemas"]
    del schemas["SystemOneRequest"]["properties"]["assets"]
    schemas["SystemOneRequest"]["properties"]["stream"] = {"type": "boolean"}
    schemas["Usage"]["properties"]["input_tokens"] = {"type": "number"}
    schemas["ScoreQuestion"]["properties"]["criteria"]["minItems"] = 2
    assert drift(OURS, json.dumps(doc)) == [
        "SystemOneRequest.assets: ours only (the published document has no such field)",
        "SystemOneRequest.stream: published only (our description lacks it)",
        "ScoreQuestion.criteria: bounds: ours {'min_items': 1}, published {'min_items': 2}",
        "Usage.input_tokens: type: ours integer, published number",
    ]
