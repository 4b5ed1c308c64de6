"""Configs: the bundled ones load, unknown keys are errors, and the provider defaults to what the environment has."""

from __future__ import annotations

import pytest

from testset_builder.config import CONFIG_DIR, default_config, load_config, make_provider
from testset_builder.errors import InputError, MissingApiKeyError


@pytest.mark.parametrize("name", ["quickstart.yaml", "openai.yaml", "anthropic.yaml"])
def test_every_bundled_config_loads(name):
    config = load_config(CONFIG_DIR / name)
    assert config.llm.provider.model and config.llm.prices.exists()


def test_an_unknown_key_names_itself_and_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("llm:\n  provider: {kind: openai, model: m, temprature: 0}\n")
    with pytest.raises(
        InputError, match=r"c.yaml: invalid config: llm.provider.temprature: Extra inputs are not permitted"
    ):
        load_config(path)


def test_without_keys_the_default_is_the_local_model(monkeypatch):
    assert default_config().llm.provider.kind == "local"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert default_config().llm.provider.kind == "anthropic"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert default_config().llm.provider.kind == "openai"


def test_a_missing_key_fails_when_the_provider_is_made_naming_the_configured_variable(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("llm:\n  provider: {kind: openai, model: gpt-4o-mini, api_key_env: TEAM_GATEWAY_KEY}\n")
    with pytest.raises(MissingApiKeyError, match="TEAM_GATEWAY_KEY"):
        make_provider(load_config(path).llm.provider)
