"""The chart takes a config with the Decide sections: Helm checks their shape against the values
schema generated from the config's models, before anything reaches a cluster."""

from __future__ import annotations

import helm_python as helm
import pytest
import yaml

from sr_control.config.load import load_text
from tests.conftest import ROOT
from tests.deploy.chart import config_text, objects, render

EXAMPLE = yaml.safe_load((ROOT / "examples" / "decide.yaml").read_text())


def test_the_example_renders_and_the_configmap_holds_it() -> None:
    config = load_text(config_text(objects(render({"config": EXAMPLE}))))
    assert list(config.virtual_models) == ["vllm-sr/router"]
    assert [r.name for r in config.virtual_models["vllm-sr/router"].routes] == ["private", "urgent", "billing"]


def test_a_condition_of_the_wrong_shape_is_refused_by_helm_naming_it() -> None:
    broken = {**EXAMPLE, "judges": {"weak": {"when": {"noul": "weak_answer", "over": 0.6}}}}
    with pytest.raises(helm.HelmValuesError) as refused:
        render({"config": broken})
    assert "/config/judges/weak/when" in str(refused.value)
