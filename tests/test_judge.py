"""The relevance judge: prompts from files, grades and their probabilities, validation, lineage."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from fake_provider import FakeProvider, digit_completion
from hypothesis import given
from hypothesis import strategies as st

from testset_builder.config import JudgingConfig
from testset_builder.errors import StructuredOutputError
from testset_builder.labels.judge import Judge, JudgePair, coherent_grade, score_position, score_probabilities
from testset_builder.llm import LLMClient
from testset_builder.llm.roles import Role
from testset_builder.llm.types import Completion, TokenLogprob
from testset_builder.prompts import PromptError, load_prompt, parse_prompt
from testset_builder.records import JudgmentSource, JudgmentStatus
from testset_builder.store import open_workspace

PAIR = JudgePair(
    "q1", "does vitamin D prevent fractures", "d1#abc", "Vitamin D lowered fracture risk by 22% in a trial."
)


@pytest.fixture
def workspace(tmp_path):
    with open_workspace(tmp_path / "ws") as ws:
        yield ws


def judge_with(workspace, answer, **provider_options) -> tuple[Judge, FakeProvider]:
    provider = FakeProvider(answer, **provider_options)
    return Judge(Role(LLMClient(provider, workspace, "test"), "fake-model")), provider


def test_prompt_files_render_their_variables_and_refuse_a_missing_one():
    prompt = load_prompt("judge/few-shot-completion")
    assert prompt.kind == "completion" and prompt.variables == {"query", "passage"}
    text = prompt.render("prompt", query="Q?", passage="P with {braces}")
    assert text.endswith("Query: Q?\nPassage: P with {braces}\nRelevance:")
    with pytest.raises(PromptError, match="needs the variable 'passage'"):
        prompt.render("prompt", query="Q?")


def test_a_prompt_hash_changes_with_its_wording():
    a = parse_prompt("x", b"---\nkind: completion\n---\nRate {query}\n")
    b = parse_prompt("x", b"---\nkind: completion\n---\nRate  {query}\n")
    assert a.sha256 != b.sha256 and len(a.sha256) == 64
    with pytest.raises(PromptError, match="front matter"):
        parse_prompt("x", b"no front matter")
    with pytest.raises(PromptError, match="kind"):
        parse_prompt("x", b"---\nkind: poem\n---\nhi")


def test_grade_probabilities_merge_spaced_digit_tokens_and_ignore_other_tokens():
    probs = score_probabilities(
        {" 2": math.log(0.5), "2": math.log(0.1), "1": math.log(0.2), "The": math.log(0.2)}, [0, 1, 2]
    )
    assert probs == pytest.approx({0: 0.0, 1: 0.25, 2: 0.75})
    assert score_probabilities({"The": -0.1}, [0, 1, 2]) is None


def test_the_score_token_is_found_after_the_score_key_of_a_json_answer():
    tokens = [
        TokenLogprob(token=t, logprob=-0.1)
        for t in ['{"', "rationale", '":"', "3", " studies", '","', "score", '":', " 2", "}"]
    ]
    assert score_position(tokens, "score").token == " 2"  # not the "3" inside the rationale
    assert score_position(tokens[:8], "score") is None


def test_a_base_model_judgment_carries_grade_probabilities_and_lineage(workspace):
    judge, provider = judge_with(workspace, lambda r: digit_completion({" 2": 0.6, " 1": 0.3, " 0": 0.1}))
    judgment = asyncio.run(judge.judge(PAIR))
    assert judgment.grade == 2 and judgment.grade_probs == pytest.approx({0: 0.1, 1: 0.3, 2: 0.6})
    assert judgment.confidence == pytest.approx(0.9) and judgment.expected_grade == pytest.approx(1.5)
    assert judgment.source is JudgmentSource.llm and judgment.status is JudgmentStatus.pending
    lineage = judgment.lineage
    assert (
        lineage.prompt_name == "judge/few-shot-completion"
        and lineage.prompt_sha256 == load_prompt("judge/few-shot-completion").sha256
    )
    assert lineage.provider == "fake:test" and lineage.temperature == 0.0
    request = provider.history[0]
    assert request.kind == "completion" and request.top_logprobs == 10 and request.stop == ("\n",)
    assert "Passage: Vitamin D lowered fracture risk" in request.prompt


def test_a_pair_more_likely_relevant_than_not_is_never_graded_0(workspace):
    judge, _ = judge_with(workspace, lambda r: digit_completion({" 0": 0.4, " 1": 0.3, " 2": 0.3}))
    judgment = asyncio.run(judge.judge(PAIR))  # the single likeliest grade is 0, but P(relevant) is 0.6
    assert (judgment.grade, judgment.confidence) == (1, pytest.approx(0.6))


@given(st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3).filter(lambda w: sum(w) > 1e-6))
def test_the_grade_and_the_relevant_decision_never_disagree(weights):
    probs = {grade: w / sum(weights) for grade, w in enumerate(weights)}
    grade, confidence = coherent_grade(probs)
    p_relevant = probs[1] + probs[2]
    assert (grade >= 1) == (p_relevant > 0.5)
    assert confidence == pytest.approx(p_relevant if grade else 1 - p_relevant) and confidence >= 0.5 - 1e-9
    assert grade != 2 or probs[2] > probs[1]


def test_the_chat_judge_maps_umbrela_scores_to_our_three_grades(workspace):
    scores = iter([3, 2, 1, 0])
    judge, provider = judge_with(
        workspace,
        lambda r: json.dumps({"rationale": "because", "score": next(scores)}),
        prompt_style="chat",
        supports_logprobs=False,
    )
    pairs = [JudgePair("q1", "query", f"c{i}", f"passage {i}") for i in range(4)]
    grades = [asyncio.run(judge.judge(pair)).grade for pair in pairs]
    assert grades == [2, 1, 0, 0]
    request = provider.history[0]
    assert request.kind == "chat" and request.response_schema["properties"].keys() == {"rationale", "score"}
    assert request.top_logprobs is None


def test_chat_grade_probabilities_come_from_the_score_token(workspace):
    tokens = ['{"', "rationale", '":"', "on topic", '","', "score", '":', "3", "}"]
    logprobs = tuple(
        TokenLogprob(
            token=t, logprob=-0.05, top={"3": math.log(0.7), "2": math.log(0.2), "1": math.log(0.1)} if t == "3" else {}
        )
        for t in tokens
    )
    completion = Completion(text="".join(tokens).replace("on topic", "on topic"), model="fake-model", logprobs=logprobs)
    judge, _ = judge_with(workspace, lambda r: completion, prompt_style="chat")
    judgment = asyncio.run(judge.judge(PAIR))
    assert judgment.grade == 2 and judgment.rationale == "on topic"
    assert judgment.grade_probs == pytest.approx({0: 0.1, 1: 0.2, 2: 0.7})


def test_an_answer_that_fails_validation_twice_is_a_recorded_failure_not_a_crash(workspace):
    judge, provider = judge_with(workspace, lambda r: '{"score": 7}', prompt_style="chat", supports_logprobs=False)
    outcomes = asyncio.run(judge.judge_many([PAIR]))
    assert isinstance(outcomes[0], StructuredOutputError) and len(provider.history) == 2  # one re-ask
    judge, _ = judge_with(workspace, lambda r: Completion(text=" maybe", model="m"))
    assert isinstance(asyncio.run(judge.judge_many([PAIR]))[0], StructuredOutputError)


def test_judgment_ids_are_the_same_on_a_rerun_and_differ_by_prompt(workspace, tmp_path):
    judge, _ = judge_with(workspace, lambda r: digit_completion({"2": 0.9, "0": 0.1}))
    first, again = asyncio.run(judge.judge(PAIR)), asyncio.run(judge.judge(PAIR))
    assert first.judgment_id == again.judgment_id
    custom = tmp_path / "custom.md"
    custom.write_bytes(b"---\nkind: completion\nscale: {0: 0, 1: 1, 2: 2}\n---\nQ {query} P {passage} R:")
    other = Judge(judge.role, JudgingConfig(prompt=str(custom)))
    assert asyncio.run(other.judge(PAIR)).judgment_id != first.judgment_id


def test_a_prompts_dir_overrides_a_bundled_prompt_by_name_and_the_bundled_ones_fill_the_gaps(workspace, tmp_path):
    from testset_builder.prompts import PromptLibrary

    (tmp_path / "mine" / "judge").mkdir(parents=True)
    (tmp_path / "mine" / "judge" / "few-shot-completion.md").write_bytes(
        b"---\nkind: completion\nscale: {0: 0, 1: 1, 2: 2}\n---\nOurs. Q {query} P {passage} R:"
    )
    library = PromptLibrary(tmp_path / "mine")
    assert library.load("judge/few-shot-completion").sections["prompt"].startswith("Ours.")
    assert library.load("judge/umbrela-chat").kind == "chat"  # not in the user's folder: the bundled one
    judge, provider = judge_with(workspace, lambda r: digit_completion({"2": 0.9, "0": 0.1}))
    ours = Judge(judge.role, prompts=library)
    asyncio.run(ours.judge(PAIR))
    assert provider.history[-1].prompt.startswith("Ours.")
    with pytest.raises(PromptError, match="no prompt 'judge/none'"):
        library.load("judge/none")
