"""The audit of synthetic labels: a random few, checked, tell the error rate of the unchecked rest, and a release,
its card and `score` say it (or say that no audit was done)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from fake_provider import FakeProvider, passage_of, question_words, shared_words_grade

from testset_builder.config import ReleaseConfig, SynthesizeConfig
from testset_builder.labels import audit
from testset_builder.labels.queue import synthetic_questions
from testset_builder.llm import LLMClient
from testset_builder.llm.roles import Roles
from testset_builder.stages import review
from testset_builder.stages.release import load_release, write_release
from testset_builder.stages.synthesize import synthesize
from testset_builder.store import audit as audit_store
from testset_builder.store import review as review_store
from testset_builder.store import rows


@pytest.mark.parametrize(("wrong_rate", "probability"), [(0.1, 0.1), (0.3, 0.1), (0.5, 0.2), (0.05, 0.3)])
def test_the_interval_covers_the_true_wrong_share_in_at_least_nine_draws_of_ten(wrong_rate, probability):
    population = 300
    covered = draws = 0
    for seed in range(400):
        rng = np.random.default_rng(seed)
        wrong = rng.random(population) < wrong_rate
        truth = wrong.mean()  # the share among these labels, which the audit estimates
        taken = rng.random(population) < probability
        if not taken.any():
            continue
        found = audit.estimate(population, list(wrong[taken]), [probability] * int(taken.sum()))
        draws += 1
        covered += found.low <= truth <= found.high
    assert draws >= 390 and covered / draws >= 0.9


def test_unequal_draw_probabilities_are_weighted_by_their_inverse():
    population, covered, estimates = 400, 0, []
    for seed in range(300):
        rng = np.random.default_rng(seed)
        wrong = rng.random(population) < 0.25
        probabilities = np.where(np.arange(population) < population // 2, 0.05, 0.2)
        wrong[population // 2 :] &= rng.random(population - population // 2) < 0.4  # the likelier drawn are rarer
        truth = wrong.mean()
        taken = rng.random(population) < probabilities
        found = audit.estimate(population, list(wrong[taken]), list(probabilities[taken]))
        estimates.append(found.share - truth)
        covered += found.low <= truth <= found.high
    assert abs(np.mean(estimates)) < 0.02  # an unweighted share would read low
    assert covered / 300 >= 0.9


def test_a_release_states_the_estimate_or_that_no_audit_was_done():
    done = audit.estimate(40, [True, False, False, False, False], [0.25] * 5)
    assert done.sentence.startswith("40 synthetic labels unchecked; estimated wrong: 20% [")
    assert done.sentence.endswith("from 5 audited (1 wrong)")
    assert done.low < 0.2 < done.high
    assert audit.estimate(40, [], []).sentence == "40 synthetic labels unchecked; no audit was done, so their error " \
        "rate is unknown"  # fmt: skip


def test_the_draw_is_the_same_on_a_rerun_and_takes_about_the_expected_share():
    ids = [f"s-{i}" for i in range(2000)]
    first = [audit.drawn(q, 0.1) for q in ids]
    assert first == [audit.drawn(q, 0.1) for q in ids]
    assert 150 <= sum(first) <= 250
    assert audit.audit_probability(10, 30) == pytest.approx(1 / 3) and audit.audit_probability(10, 4) == 1.0


def words_question(request):
    grade = shared_words_grade(request.prompt)
    if grade is not None:
        return grade
    words = question_words(passage_of(request.prompt))[: 3 + request.seed % 3]
    return f" how does {' '.join(words)} work number {request.seed % 89}?"


def test_synthesize_queues_the_audit_draw_and_the_release_estimates_from_its_verdicts(docs_workspace):
    workspace = docs_workspace
    client = LLMClient(FakeProvider(words_question), workspace, "synthesize")
    settings = SynthesizeConfig(questions=12, mine=False, critic=False, check_sources=False, audit=4)
    summary = asyncio.run(synthesize(workspace, Roles.single(client, "fake-model"), settings))
    recorded = audit_store.recorded(workspace.db)
    assert set(recorded) == set(summary.query_ids) and {p for p, _ in recorded.values()} == {4 / 12}
    drawn = sorted(q for q, (_, taken) in recorded.items() if taken)
    assert len(drawn) == summary.audit_drawn > 0
    queued = [i for i in review_store.queued_items(workspace.db, kind="question") if i.reason.startswith("audit:")]
    assert sorted(i.query_id for i in queued) == drawn

    before = load_release(write_release(workspace, "1.0.0").path).manifest["counts"]["checked_by_human"]
    assert before["synthetic_audit"]["audited"] == 0
    assert "no audit was done" in before["synthetic_audit"]["statement"]

    for n, item in enumerate(queued):
        action = "drop_question" if n == 0 else "keep_question"
        details = {"reason": "unanswerable"} if n == 0 else {}
        review.submit(workspace, "ann", item.item_id, action, f"audit-{n}", **details)
    release = load_release(write_release(workspace, "1.1.0").path)
    stated = release.manifest["counts"]["checked_by_human"]["synthetic_audit"]
    # the kept ones were checked and the dropped one left the set: the labels of the other questions are unchecked
    unchecked = sum(len(chunks) for query_id, chunks in release.qrels.items() if query_id not in drawn)
    assert stated["audited"] == len(queued) and stated["wrong"] == 1 and stated["unchecked"] == unchecked
    assert stated["share_wrong"] == pytest.approx(1 / len(queued))
    card = (release.path / "README.md").read_text(encoding="utf-8")
    assert f"{unchecked} synthetic labels unchecked; estimated wrong: {100 / len(queued):.0f}%" in card


def test_a_release_that_holds_unreviewed_questions_ships_only_those_a_reviewer_kept(docs_workspace):
    workspace = docs_workspace
    client = LLMClient(FakeProvider(words_question), workspace, "synthesize")
    settings = SynthesizeConfig(questions=10, mine=False, critic=False, check_sources=False, audit=3)
    summary = asyncio.run(synthesize(workspace, Roles.single(client, "fake-model"), settings))
    queued = [i for i in review_store.queued_items(workspace.db, kind="question") if i.reason.startswith("audit:")]
    kept, dropped = queued[1:], queued[:1]
    review.submit(workspace, "ann", dropped[0].item_id, "drop_question", "held-0", reason="unanswerable")
    for n, item in enumerate(kept):
        review.submit(workspace, "ann", item.item_id, "keep_question", f"held-{n + 1}")

    policy = ReleaseConfig(hold_unreviewed=True)
    release = load_release(write_release(workspace, "1.0.0", policy=policy).path)
    synthetic = {q for q in release.qrels if q.startswith("s-")}
    assert synthetic == {i.query_id for i in kept}  # the dropped one and the ten no one answered stay out
    counts = release.manifest["counts"]["checked_by_human"]
    assert counts["unreviewed_held_back"] == len(summary.query_ids) - len(queued)
    assert counts["synthetic_audit"]["unchecked"] == 0
    assert "synthetic questions no reviewer kept held back" in release.manifest["policy"]["rules"]
    card = (release.path / "README.md").read_text(encoding="utf-8")
    assert f"synthetic questions held back: {counts['unreviewed_held_back']} no reviewer kept" in card

    every = load_release(write_release(workspace, "1.1.0").path)  # the default releases them, their labels unchecked
    assert {q for q in every.qrels if q.startswith("s-")} == set(summary.query_ids) - {dropped[0].query_id}
    assert "held back:" not in (every.path / "README.md").read_text(encoding="utf-8")


def test_an_audit_as_large_as_the_set_queues_every_question_so_each_can_be_kept(docs_workspace):
    workspace = docs_workspace
    client = LLMClient(FakeProvider(words_question), workspace, "synthesize")
    settings = SynthesizeConfig(questions=8, mine=False, critic=False, check_sources=False, audit=8)
    summary = asyncio.run(synthesize(workspace, Roles.single(client, "fake-model"), settings))
    queued = {i.query_id for i in review_store.queued_items(workspace.db, kind="question")}
    assert summary.audit_drawn == 8 and queued == set(summary.query_ids)


def test_a_release_holding_every_question_back_says_why_and_how_to_go_on(docs_workspace, capsys):
    from testset_builder.cli import EXIT_BAD_INPUT, main

    workspace = docs_workspace
    client = LLMClient(FakeProvider(words_question), workspace, "synthesize")
    settings = SynthesizeConfig(questions=4, mine=False, critic=False, check_sources=False, audit=0)
    asyncio.run(synthesize(workspace, Roles.single(client, "fake-model"), settings))
    release = ["release", "-w", str(workspace.root), "--version", "1.0.0"]
    assert main([*release, "--hold-unreviewed"]) == EXIT_BAD_INPUT
    said = capsys.readouterr().err
    assert "4 synthetic questions no reviewer kept are held back" in said and "--release-unreviewed" in said
    assert main([*release, "--release-unreviewed", "--json"]) == 0


def synthesize_with(workspace, identity: str, questions: int) -> list[str]:
    """Questions by a generator of this identity (``local:...`` is the embedded model's kind, declared weak), no
    audit or source check: the query ids made."""
    client = LLMClient(FakeProvider(words_question, identity=identity), workspace, "synthesize")
    settings = SynthesizeConfig(questions=questions, mine=False, critic=False, check_sources=False, audit=0)
    return asyncio.run(synthesize(workspace, Roles.single(client, "fake-model"), settings)).query_ids


def test_unset_the_release_holds_back_only_the_unanswered_questions_a_weak_generator_wrote(docs_workspace):
    workspace = docs_workspace
    weak = synthesize_with(workspace, "local:stand-in", 4)
    synthesize_with(workspace, "fake:test", 8)
    hosted = set(rows.synthetic_query_ids(workspace.db)) - set(weak)
    assert len(weak) == 4 and hosted
    review.keep_release_gate(workspace, None)  # what `run` does with release.hold_unreviewed unset
    items = review_store.queued_items(workspace.db, kind="question")
    queued = {i.query_id: i.item_id for i in items}
    assert set(queued) == set(weak)  # the weak generator's questions, and only those, are queued for review
    assert all(i.reason.startswith("held:") and i.priority > 2 for i in items)  # before any optional pair
    stats = review.stats(workspace)
    assert (stats.release_waits_for, stats.release_waiting) == (4, 4)
    listed = {q["query_id"]: q["status"] for q in synthetic_questions(workspace, limit=100)[0]}
    assert {listed[q] for q in weak} == {"held, waiting"} and {listed[q] for q in hosted} == {"not reviewed"}

    review.submit(workspace, "ann", queued[weak[0]], "keep_question", "keep-0")
    review.submit(workspace, "ann", queued[weak[1]], "drop_question", "drop-1", reason="unanswerable")
    review.submit(workspace, "ann", queued[weak[2]], "edit_question", "edit-2", edited_text="what does the tool do?")
    assert review.stats(workspace).release_waiting == 1  # an edit answers a question: its reviewer wrote the new one
    assert review.queue_held(workspace) == 0  # and the edit is not queued as a question waiting for a reviewer

    release = load_release(write_release(workspace, "1.0.0").path)  # the default policy: hold_unreviewed unset
    synthetic = {q for q, row in release.query_meta.items() if row.get("origin") == "synthetic"}
    edited = review_store.edited_query_id(weak[2], "what does the tool do?")
    assert synthetic == hosted | {weak[0], edited}  # the dropped, the edited-away and the unanswered one stay out
    assert release.manifest["counts"]["checked_by_human"]["unreviewed_held_back"] == 1
    assert release.manifest["policy"]["hold_unreviewed"] is None
    card = (release.path / "README.md").read_text(encoding="utf-8")
    assert "synthetic questions held back: 1 no reviewer kept, written by a weak generator" in card


def test_holding_every_unreviewed_question_releases_a_reviewers_edit_in_place_of_the_original(docs_workspace):
    workspace = docs_workspace
    made = synthesize_with(workspace, "fake:test", 3)
    review.queue_questions(workspace)
    item = review_store.question_item_id(made[0])
    review.submit(workspace, "ann", item, "edit_question", "edit-0", edited_text="how is the tool configured?")
    release = load_release(write_release(workspace, "1.0.0", policy=ReleaseConfig(hold_unreviewed=True)).path)
    assert set(release.queries) == {review_store.edited_query_id(made[0], "how is the tool configured?")}


@pytest.mark.parametrize(
    ("hold", "questions", "decided"),
    [(None, None, None), (None, True, None), (None, False, False), (True, None, True), (False, None, False)],
)
def test_what_a_release_holds_follows_the_config_and_never_what_no_reviewer_is_served(hold, questions, decided):
    from testset_builder.api.workspace import load_config
    from testset_builder.labels.policy import holds_unreviewed

    config = load_config(None, release__hold_unreviewed=hold, review__questions=questions)
    assert holds_unreviewed(config) is decided


def test_a_reviewer_starting_before_any_run_is_served_the_questions_a_release_would_hold(docs_workspace):
    from testset_builder.api import review_session
    from testset_builder.api.workspace import load_config

    workspace = docs_workspace
    weak = synthesize_with(workspace, "local:stand-in", 3)  # `synthesize` alone: no run has recorded a policy
    with review_session(load_config(None), "ann", workspace=workspace) as session:
        served = session.next_item()
        assert served.kind == "question" and served.query["query_id"] in weak and served.reason.startswith("held:")
        assert (session.stats().release_waits_for, session.stats().release_waiting) == (3, 3)


def test_synthesize_says_how_many_of_a_weak_generators_questions_wait_for_a_reviewer(docs_workspace, monkeypatch):
    from fake_provider import demo_config

    import testset_builder.llm.roles as roles
    from testset_builder import api
    from testset_builder.api.stages import doubted_words

    embedded = FakeProvider(words_question, identity="local:stand-in")
    monkeypatch.setattr(roles, "make_provider", lambda config: embedded)
    config = api.load_config(
        demo_config(), synthesize__questions=4, synthesize__audit=0, synthesize__check_sources=False,
        synthesize__mine=False,
    )  # fmt: skip
    made = api.synthesize(config, workspace=docs_workspace)
    assert made.made == 4 and made.held_waiting == 4
    assert doubted_words(made.doubted, made.doubted_waiting, made.held_waiting).startswith(
        "; 4 held back until reviewed (release.hold_unreviewed)"
    )
    released = api.load_config(config, release__hold_unreviewed=False)
    assert api.synthesize(released, workspace=docs_workspace).held_waiting == 0  # false: nothing is held


def test_a_config_holding_every_question_while_serving_reviewers_none_is_refused_saying_why():
    from testset_builder.api.workspace import load_config
    from testset_builder.errors import InputError

    with pytest.raises(InputError, match=r"review\.questions: false serves reviewers pairs only"):
        load_config(None, release__hold_unreviewed=True, review__questions=False)


def test_a_doubted_question_of_a_hosted_generator_is_not_said_to_be_held_for_its_writer(docs_workspace):
    workspace = docs_workspace
    made = synthesize_with(workspace, "fake:test", 3)
    with workspace.transaction() as db:  # the estimate doubted one question's source
        review_store.enqueue(
            db, [review_store.QueuedItem(review_store.question_item_id(made[0]), "question", made[0], None, 2.5,
                                         "doubted: another chunk looks a better source", 1)], "2026-12-07T00:00:00Z",
        )  # fmt: skip
    release = load_release(write_release(workspace, "1.0.0").path)
    counts = release.manifest["counts"]["checked_by_human"]
    assert counts["doubted_held_back"] == 1 and counts["unreviewed_held_back"] == 0
    assert "held back:" not in (release.path / "README.md").read_text(encoding="utf-8")


def test_a_reviewer_whose_config_holds_every_question_is_served_a_hosted_generators_question(docs_workspace):
    from testset_builder.api import review_session
    from testset_builder.api.workspace import load_config

    workspace = docs_workspace
    made = synthesize_with(workspace, "fake:test", 2)  # a hosted writer: unset, nothing of it would be held
    with review_session(load_config(None, release__hold_unreviewed=True), "ann", workspace=workspace) as session:
        served = session.next_item()
        assert served.query["query_id"] in made and served.reason.startswith("held:")
        assert session.stats().release_waits_for == 2
