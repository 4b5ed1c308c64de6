"""A provider a user adds in one file: a class that declares what it can do and builds itself from a role's config,
registered under a kind of its own; a config names that kind, and the stages and the plan use it like the built-in
ones (its prompt style, its log-probabilities or none)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testset_builder import api
from testset_builder.errors import InputError
from testset_builder.llm import register_provider
from testset_builder.llm.types import Completion, Usage
from testset_builder.registry import Abilities


class EchoProvider:
    """A chat model that makes a question of the passage's first words: no network, no key."""

    supports_completion = False
    prompt_style = "chat"
    supports_logprobs = False
    abilities = Abilities()  # a hosted model: neither weak nor on this machine

    def __init__(self, model: str) -> None:
        self.identity = f"echo:{model}"
        self.calls = 0

    @classmethod
    def from_config(cls, config) -> EchoProvider:
        return cls(config.model)

    async def complete(self, request) -> Completion:
        self.calls += 1
        passage = request.messages[-1].content.split("Passage: ", 1)[-1]
        words = list(dict.fromkeys(w.lower() for w in passage.split() if w.isalpha() and len(w) > 4))
        first, second = words[request.seed % len(words)], words[(request.seed + 1) % len(words)]
        question = f"Query: how are {first} and {second} related?"
        evidence = f"Evidence: {' '.join(passage.split()[:8])}"
        return Completion(
            text=f"{question}\n{evidence}", model=request.model, usage=Usage(input_tokens=50, output_tokens=20)
        )

    async def aclose(self) -> None:
        pass


@pytest.fixture
def echo_kind():
    from testset_builder import registry

    register_provider("echo", EchoProvider)
    yield "echo"
    registry._KINDS.pop("echo", None)


def test_a_provider_registered_in_one_file_writes_the_questions_and_the_plan_reads_its_abilities(tmp_path, echo_kind):
    docs = Path(__file__).resolve().parents[1] / "examples" / "corpus"
    config = api.load_config(
        None, workspace=tmp_path / "ws", generator={"kind": echo_kind, "model": "echo-1"},
        synthesize={"questions": 3, "critic": False, "mine": False, "styles": {"natural": 1.0}},
        run={"sources": [str(docs)]},
    )  # fmt: skip
    api.chunk(config)
    made = api.synthesize(config)
    assert made.made == 3 and made.calls >= 3
    planned = api.plan(config)
    questions = planned.steps[0]
    assert (questions.stage, questions.step, questions.model) == ("synthesize", "questions", "echo-1")
    with api.open_workspace(config) as ws:
        models = {row[0] for row in ws.db.execute("SELECT DISTINCT json_extract(request, '$.model') FROM llm_calls")}
        kinds = {row[0] for row in ws.db.execute("SELECT DISTINCT json_extract(request, '$.kind') FROM llm_calls")}
    assert models == {"echo-1"} and kinds == {"chat"}  # the class's declared prompt style: chat requests


def test_a_kind_already_there_is_replaced_only_when_asked(echo_kind):
    with pytest.raises(ValueError, match="registered already"):
        register_provider("openai", EchoProvider)
    with pytest.raises(ValueError, match="registered already"):
        register_provider(echo_kind, EchoProvider)
    register_provider(echo_kind, EchoProvider, replace=True)


def test_a_kind_nobody_registered_is_refused_with_the_kinds_there_are():
    with pytest.raises(InputError, match=r"unknown provider kind 'nope'.*openai, anthropic, local"):
        api.load_config(None, generator={"kind": "nope", "model": "m"})


class SmallSelfHosted(EchoProvider):
    """A small model a user serves on this machine under a kind of their own (not the built-in ``local``): it says
    what it is, and nothing else tells the tool."""

    abilities = Abilities(weak=True, local=True)


@pytest.fixture
def small_kind():
    from testset_builder import registry

    register_provider("small", SmallSelfHosted)
    yield "small"
    registry._KINDS.pop("small", None)


def small_config(tmp_path: Path, kind: str):
    docs = Path(__file__).resolve().parents[1] / "examples" / "corpus"
    (tmp_path / "queries.txt").write_text("how is ndcg computed\nwhat does recall at k count\n", encoding="utf-8")
    return api.load_config(
        None, workspace=tmp_path / "ws", generator={"kind": kind, "model": "tiny-1"},
        synthesize={"critic": True, "mine": True},
        run={"sources": [str(docs)], "queries": str(tmp_path / "queries.txt")},
    )  # fmt: skip


def test_a_provider_declaring_itself_weak_and_local_gets_the_embedded_models_treatment(tmp_path, small_kind, echo_kind):
    from testset_builder.llm.roles import open_roles
    from testset_builder.stages.synthesize.stage import decides_by_estimate
    from testset_builder.store import open_workspace

    small, hosted = small_config(tmp_path, small_kind), small_config(tmp_path, echo_kind)
    # its pools wait for the relevance estimate, and its questions for reviewers, as the embedded model's do
    assert not api.judges_pools(small) and api.checks_questions(small)
    assert api.judges_pools(hosted) and not api.checks_questions(hosted)
    planned, billed = api.plan(small), api.plan(hosted)
    notes = {(s.stage, s.step): s.note for s in planned.steps if s.note}
    assert notes[("synthesize", "critic")] == notes[("synthesize", "mining")] == "by the relevance estimate: no call"
    assert "pools only" in notes[("propose", "judging")]
    assert not any(s.note for s in billed.steps)  # the same model, declared hosted, judges every pair
    questions = planned.steps[0]
    assert questions.calls > 0 and questions.cost_usd == 0.0  # on this machine: free, priced or not
    assert billed.steps[0].cost_usd is None  # hosted and in no price table: its price is unknown
    timed = [line for line in planned.timing + billed.timing if line.startswith("tiny-1:")]
    assert "output tokens/s" in timed[0] and "s a call" in timed[1]  # timed by its token rates, not calls in flight
    with open_workspace(tmp_path / "ws") as ws:
        roles = open_roles(small, ws, "synthesize")
        assert roles.judge.weak and decides_by_estimate("auto", roles.judge)
        assert not decides_by_estimate("auto", open_roles(hosted, ws, "synthesize").judge)


def test_a_provider_class_that_does_not_say_what_it_is_is_refused_when_registered():
    class Unsaid:
        prompt_style, supports_logprobs, supports_completion = "chat", False, False

        @classmethod
        def from_config(cls, config):
            return cls()

    with pytest.raises(ValueError, match="does not declare abilities"):
        register_provider("unsaid", Unsaid)


def test_a_model_with_a_small_context_is_warned_of_before_its_requests_fail(tmp_path):
    from testset_builder import registry

    class Cramped(EchoProvider):
        abilities = Abilities(context_tokens=60)  # shorter than any question prompt with its passage

    register_provider("cramped", Cramped)
    try:
        planned = api.plan(small_config(tmp_path, "cramped"))
    finally:
        registry._KINDS.pop("cramped", None)
    warning = next(line for line in planned.warnings if "context" in line)
    assert "longer than its context of 60 tokens" in warning and "chunking.size" in warning
    assert not [line for line in api.plan(small_config(tmp_path, "openai")).warnings if "context" in line]
