"""A systemone/0.2 deployment that needs what 0.2 cannot carry is refused at config load."""

from __future__ import annotations

from sr_control.config.load import validate_text

CONFIG = """\
version: 2
deployments:
  gateway-d3:
    provider: systemone
    endpoint: https://gateway.example.com/v1/systemone
    model: d3
    schema: {schema}
    deviations: [state_text]
    max_concurrency: 8
    capabilities: {{question_types: [noul, choice, span], modalities: [text, video], presets: [jailbreak, pii]}}
"""


def test_each_need_is_one_line_naming_the_rule_and_the_deployment() -> None:
    report = validate_text(CONFIG.format(schema="systemone/0.2"), "router.yaml")
    assert [str(p) for p in report.errors] == [
        (
            "router.yaml:10:51: error: deployments.gateway-d3.capabilities.question_types[2]: deployment "
            "'gateway-d3' speaks systemone/0.2, which cannot carry span questions (0.2 asks noul, choice, score "
            "and box questions)"
        ),
        (
            "router.yaml:10:77: error: deployments.gateway-d3.capabilities.modalities[1]: deployment "
            "'gateway-d3' speaks systemone/0.2, which cannot carry video assets (0.2 takes text and images)"
        ),
        (
            "router.yaml:10:106: error: deployments.gateway-d3.capabilities.presets[1]: deployment 'gateway-d3' "
            "speaks systemone/0.2, which cannot carry preset 'pii': it needs span questions (0.2 presets expand "
            "to instructions and criteria)"
        ),
    ]


def test_the_same_deployment_on_vllm_sr_5_0_loads() -> None:
    assert validate_text(CONFIG.format(schema="vllm-sr/5.0"), "router.yaml").valid


def test_the_seed_snippet_still_loads_as_written() -> None:
    seed = CONFIG.format(schema="systemone/0.2").rsplit("    capabilities", 1)[0]
    assert validate_text(seed, "router.yaml").valid
