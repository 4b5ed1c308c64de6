"""Configs: one Config for every stage, roles, overrides validated like the file, and keys only from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from testset_builder import bundled
from testset_builder.config import Config, default_config, load_config, override, resolve_config
from testset_builder.errors import InputError, MissingApiKeyError
from testset_builder.llm.roles import make_provider


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["quickstart", "openai", "anthropic"])
def test_every_bundled_config_loads_by_name_and_names_a_model_for_each_role(name):
    config = load_config(name)
    assert config.generator_role().model and config.judge_role().model
    assert name in bundled.config_names()


def test_an_unknown_key_names_itself_and_the_file(tmp_path):
    path = write(tmp_path, "generator: {kind: openai, model: m, temprature: 0}\n")
    with pytest.raises(
        InputError, match=r"c.yaml: invalid config: generator.temprature \(line 1\): Extra inputs are not permitted"
    ):
        load_config(path)


def test_a_config_that_is_not_a_mapping_says_what_a_config_is(tmp_path):
    with pytest.raises(InputError, match="a config is a YAML mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_without_keys_the_default_is_the_local_model(monkeypatch):
    assert default_config().generator_role().kind == "local"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    assert default_config().generator_role().kind == "anthropic"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert default_config().generator_role().kind == "openai"


def test_the_environment_can_name_the_config(tmp_path, monkeypatch):
    path = write(tmp_path, "workspace: team-ws\n")
    monkeypatch.setenv("TESTSET_BUILDER_CONFIG", str(path))
    assert default_config().workspace == tmp_path / "team-ws"


def test_a_missing_key_fails_when_the_provider_is_made_naming_the_configured_variable(tmp_path):
    config = load_config(
        write(tmp_path, "generator: {kind: openai, model: gpt-4o-mini, api_key_env: TEAM_GATEWAY_KEY}\n")
    )
    with pytest.raises(MissingApiKeyError, match="TEAM_GATEWAY_KEY"):
        make_provider(config.generator_role())


def test_a_self_hosted_server_needs_no_key(tmp_path):
    config = load_config(write(tmp_path, "generator: {kind: openai, model: qwen, base_url: 'http://127.0.0.1:9/v1'}\n"))
    provider = make_provider(config.generator_role())
    assert provider.identity == "openai:http://127.0.0.1:9/v1"


def test_the_judge_defaults_to_the_generator_and_a_partial_judge_changes_only_what_it_names(tmp_path):
    same = load_config(write(tmp_path, "generator: {kind: openai, model: gpt-4o-mini}\n", "a.yaml"))
    assert same.judge_role() == same.generator_role()
    partial = load_config(
        write(
            tmp_path,
            "generator: {kind: openai, model: gpt-4o-mini, base_url: 'http://x/v1'}\njudge: {model: gpt-4.1}\n",
            "b.yaml",
        )
    )
    assert (partial.judge_role().model, partial.judge_role().base_url) == ("gpt-4.1", "http://x/v1")
    other = load_config(
        write(
            tmp_path,
            "generator: {kind: openai, model: gpt-4o-mini}\njudge: {kind: anthropic, model: claude-sonnet-4-0}\n",
            "c.yaml",
        )
    )
    assert (other.judge_role().kind, other.judge_role().base_url) == ("anthropic", None)


def test_a_judge_without_a_model_for_its_own_provider_is_refused_at_load(tmp_path):
    with pytest.raises(InputError, match=r"judge: .*needs a model name"):
        load_config(write(tmp_path, "generator: {kind: openai, model: m}\njudge: {kind: anthropic}\n"))


def test_the_local_provider_refuses_a_model_it_would_ignore(tmp_path):
    with pytest.raises(InputError, match=r"kind local runs the packaged gemma-3-270m or a \.gguf file"):
        load_config(write(tmp_path, "generator: {kind: local, model: llama-3-8b}\n"))
    gguf = load_config(write(tmp_path, "generator: {kind: local, model: /models/qwen2.5-0.5b.gguf}\n", "g.yaml"))
    assert gguf.generator_role().model_name == "qwen2.5-0.5b"


def test_configs_written_before_roles_still_load(tmp_path):
    config = load_config(
        write(tmp_path, "llm:\n  provider: {kind: openai, model: gpt-4o-mini}\n  limits: {max_in_flight: 3}\n")
    )
    assert config.generator_role().model == "gpt-4o-mini" and config.limits.max_in_flight == 3


def test_relative_paths_in_a_config_are_taken_from_its_folder(tmp_path):
    (tmp_path / "project").mkdir()
    config = load_config(write(tmp_path / "project", "workspace: ws\nprompts_dir: my-prompts\nprices: p.yaml\n"))
    assert config.workspace == tmp_path / "project" / "ws"
    assert (
        config.prompts_dir == tmp_path / "project" / "my-prompts" and config.prices == tmp_path / "project" / "p.yaml"
    )
    run = load_config(write(tmp_path / "project", "run: {sources: [docs], queries: q.txt, runs: [runs/a.trec]}\n")).run
    assert run.sources == [tmp_path / "project" / "docs"] and run.queries == tmp_path / "project" / "q.txt"
    assert run.runs == [tmp_path / "project" / "runs" / "a.trec"]


def test_a_flag_and_a_config_key_go_through_the_same_validation(tmp_path):
    config = load_config(write(tmp_path, "synthesize: {questions: 10}\nchunking: {size: 500, overlap: 50}\n"))
    assert override(config, {"synthesize.questions": 3, "chunking.size": None}).synthesize.questions == 3
    with pytest.raises(
        InputError, match=r"invalid setting: synthesize.questions: Input should be greater than or equal to 1"
    ):
        override(config, {"synthesize.questions": 0})
    with pytest.raises(InputError, match=r"chunking: overlap \(50\) must be smaller than size \(40\)"):
        override(config, {"chunking.size": 40})
    with pytest.raises(InputError, match=r"invalid config: chunking \(line 1\): overlap"):
        load_config(write(tmp_path, "chunking: {size: 40, overlap: 50}\n", "bad.yaml"))


def test_every_stage_section_is_in_the_one_config():
    sections = set(Config.model_fields)
    assert {"chunking", "synthesize", "propose", "judging", "release", "limits", "generator", "judge"} <= sections
    assert resolve_config("quickstart", {"propose.depth": 7, "release.adjudicator": "ann"}).propose.depth == 7


def test_a_missing_config_file_is_one_clear_line(tmp_path):
    with pytest.raises(InputError, match=r"nope.yaml: cannot read config"):
        load_config(tmp_path / "nope.yaml")
