"""The stages of ``run``, each declared once (:class:`~testset_builder.registry.Stage`): how ``run`` calls it, the
line it prints, its steps in the plan and its commands. ``run``, the CLI's lines, the plan and ``--help`` read
these declarations; a stage of your own is its module and one :func:`~testset_builder.registry.register_stage`.

chunk -> plan -> synthesize -> propose (``run.queries``) -> import-logs, select-logs, propose-logs (``run.logs``)
-> select (a review round) -> review (a stop while pairs or doubted questions wait for a human) -> estimate (the
verdicts refit it) -> release -> report (baseline runs and the report).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..registry import Stage, register_stage, stage_named
from .corpus import chunk, import_logs
from .labelling import estimate, judges_pools, propose, select, select_logs, synthesize
from .pipeline import checks_questions, plan, report_runs
from .releases import release
from .scoring import baseline, report

if TYPE_CHECKING:
    from ..stages.plan import Planning, Step
    from .pipeline import RunStep


def summary_line(stage: str, result: Any) -> str:
    """One line of what a stage did, from its result (or its JSON document), as its declaration words it."""
    document = result.as_dict() if hasattr(result, "as_dict") else result
    declared = stage_named(stage)
    if not isinstance(document, dict) or declared is None or declared.summary is None:
        return "done"
    return declared.summary(document)


# --- the words of each stage's line ---------------------------------------------------------------------------


def boilerplate_line(by_reason: dict[str, int]) -> str:
    """How many chunks are marked as page furniture, by why: "12 marked boilerplate (9 navigation, 3 repeated:
    searchable, never a question's source)"."""
    total = sum(by_reason.values())
    if not total:
        return "0 marked boilerplate"
    reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(by_reason.items(), key=lambda item: -item[1]))
    return f"{total} marked boilerplate ({reasons}: searchable, never a question's source)"


def skipped_text(skipped: dict[str, int]) -> str:
    """The requests an import skipped, by reason: ``3 no retrieval, 2 seen before``."""
    return ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))


def doubted_words(doubted: int, waiting: int, held: int = 0) -> str:
    """What a synthesize line says of the questions a release holds back: the doubted, and those no reviewer
    answered of a weak generator's (``held``, the doubted among them): how many still wait for a reviewer."""
    if held > waiting:
        return f"; {held} held back until reviewed (release.hold_unreviewed)" + (
            f", {doubted} doubted" if doubted else ""
        )
    if not doubted:
        return ""
    if not waiting:
        return f"; {doubted} doubted, all reviewed"
    if waiting == doubted:
        return f"; {doubted} doubted, held back until reviewed"
    return f"; {doubted} doubted, {waiting} held back until reviewed"


def quality_words(validation: dict) -> str:
    """What the cross-validation says of the estimate in this workspace, in words."""
    from ..labels.fitting import in_words

    if not validation.get("folds"):
        return f"{validation['reason']} (its quality here is unknown until reviewers grade 20 pairs)"
    kept = validation["kept"]
    auc = validation["refit_auc"] if kept else validation["centre_auc"]
    ece = validation["refit_ece"] if kept else validation["centre_ece"]
    return f"{validation['reason']}; {in_words(auc, ece, validation['labels'])}"


def _chunked(result: dict) -> str:
    return (
        f"{result['documents']} documents ({result['new']} new, {result['changed']} changed, "
        f"{result['unchanged']} unchanged), {result['chunks_added']} chunks added; "
        f"{boilerplate_line(result.get('boilerplate_by_reason') or {})}"
    )


def _made(result: dict) -> str:
    doubted = doubted_words(result.get("doubted", 0), result.get("doubted_waiting", 0), result.get("held_waiting", 0))
    fewer = (
        f"; fewer than asked ({result['shortfall']}), going on with these"
        if result.get("shortfall") and not result.get("retryable")
        else ""
    )
    if result.get("generation_failed"):
        failure = f": {result['failure']}" if result.get("failure") else ""
        fewer += f"; {result['generation_failed']} generations failed{failure}"
    return (
        f"{result['made']} questions made, {result['already_made']} already made; {result['calls']} LLM calls "
        f"({result['cache_hits']} from the cache){doubted}{fewer}"
    )


def _proposed(result: dict) -> str:
    line = f"{result['queries']} queries, {result['candidates']} candidate rows pooled"
    judging = result.get("judging") or {}
    if not (judging.get("judged") or judging.get("already_judged")):  # pools only: nothing labels them yet
        line += (
            "; no judge ran, so these real queries get labels only from reviewers' verdicts (`select` draws "
            "pairs for review; until then a release gives them the estimate's figures, not labels)"
        )
    return line


def _imported(result: dict) -> str:
    if result["already_imported"]:
        return f"{result['source']} imported before: nothing added"
    return (
        f"{result['records']} records, {result['new_queries']} new queries; "
        f"{result['unknown_ids'] - result.get('unknown_ids_by_text', 0)} unknown ids, "
        f"{result['unmatched_texts']} unmatched texts, {result['unreadable']} lines unreadable"
        + (f"; skipped {skipped_text(result['skipped'])}" if result.get("skipped") else "")
    )


def _drawn_logs(result: dict) -> str:
    return f"round {result['round']}: {result['drawn']} of {result['considered']} logged queries drawn, failures first"


def _drawn(result: dict) -> str:
    line = f"round {result['round']}: {result['drawn']} of {result['considered']} pairs drawn for review"
    if result["drawn"] > result["budget"]:
        line += (
            f" ({result['take_all']} taken for sure, {result['sampled']} at random where "
            f"{result['sample_budget']:g} were expected: a random draw's count varies around its budget)"
        )
    return line


def _refit(result: dict) -> str:
    quality = quality_words(result["validation"])
    return f"{result['pairs']} pairs re-estimated on {result['verdicts']} verdicts; {quality}"


def _released(result: dict) -> str:
    return f"{result['version']} ({'new' if result['new'] else 'unchanged'})"


# --- how run calls each stage ----------------------------------------------------------------------------------


def _chunk(step: RunStep):
    with step.bar("chunk") as shown:  # each stage's bar is closed before its line is told
        return chunk(step.config, progress=shown)


def _plan(step: RunStep):
    return plan(step.config, workspace=step.workspace, review=step.review)


def _synthesize(step: RunStep):
    with step.bar("synthesize") as shown:
        return synthesize(step.config, workspace=step.workspace, progress=shown)


def _synthesize_short(made) -> bool:
    """A stage waiting for a batch, or short for want of material (every chunk used), did what it could."""
    return not made.batch_id and made.incomplete and made.retryable


def _propose(step: RunStep):
    config = step.config
    if config.run.queries is None:
        return None
    with step.bar("propose") as shown:
        return propose(
            config, config.run.queries, judge=judges_pools(config), workspace=step.workspace, progress=shown,
            runs=config.run.runs,
        )  # fmt: skip


def _import_logs(step: RunStep):
    logs = step.config.run.logs
    return None if logs is None else import_logs(step.config, logs, workspace=step.workspace)


def _select_logs(step: RunStep):
    from ..store import logs as stored_logs

    if step.config.run.logs is None or not stored_logs.undrawn_count(step.workspace.db):
        return None
    return select_logs(step.config, step.config.run.log_limit, workspace=step.workspace)


def _propose_logs(step: RunStep):
    config = step.config
    if config.run.logs is None:
        return None
    with step.bar("propose") as shown:
        return propose(config, from_logs=True, judge=judges_pools(config), workspace=step.workspace, progress=shown)


def _select(step: RunStep):
    from ..store import draws, estimates

    config, db = step.config, step.workspace.db
    first_round = draws.next_round(db) == 1 and estimates.any_estimates(db)
    if not (config.run.review_budget and first_round and step.review):
        return None
    return select(config, config.run.review_budget, workspace=step.workspace)


def _review(step: RunStep) -> None:
    """A stop while pairs drawn for review, or synthetic questions the release waits for, wait for a human: the
    questions the estimate doubts, or every question when the release holds back those no reviewer answered."""
    from ..labels.policy import holds_unreviewed, unanswered_questions
    from ..stages.review import keep_release_gate
    from ..store import draws
    from ..store import review as review_store

    if not step.review:
        return None
    holds = holds_unreviewed(step.config)
    keep_release_gate(step.workspace, holds)
    db = step.workspace.db
    waiting = draws.waiting_pairs(db)
    held = unanswered_questions(db, holds)
    doubted = {q for q, answered in review_store.doubted_questions(db).items() if not answered}
    questions = held | doubted if checks_questions(step.config) else held
    if waiting or questions:
        step.wait_for_review(waiting, len(questions), held=bool(held - doubted))
    return None


def _estimate(step: RunStep):
    from ..store import estimates

    if not estimates.graded_estimated_pairs(step.workspace.db):  # the verdicts refit it before the release carries it
        return None
    return estimate(step.config, workspace=step.workspace)


def _release(step: RunStep):
    return release(step.config, workspace=step.workspace)


def _report(step: RunStep):
    """Baseline runs of the release, then its report over them and the config's runs."""
    from ..retrieval import dense_available

    released = step.result.stages.get("release")
    if released is None:
        return None
    config = step.config
    spec = f"{config.workspace}@{released.version}"
    for retriever in config.run.baselines:
        if retriever == "dense" and not dense_available():
            continue
        path = Path(config.workspace) / "reports" / "runs" / f"{retriever}-{released.version}.trec"
        path.parent.mkdir(parents=True, exist_ok=True)
        baseline(spec, retriever, out=path)
        step.result.baselines.append(path)
    return report(spec, report_runs(step.result.baselines, config.run.runs))


# --- their steps in the plan (the plan's module is slow to import: imported when asked) ----------------------------


def _synthesize_plan(planning: Planning) -> list[Step]:
    from ..stages.plan import synthesize_steps

    return synthesize_steps(planning)


def _propose_plan(planning: Planning) -> list[Step]:
    from ..stages.plan import propose_steps

    return propose_steps(planning)


def _propose_logs_plan(planning: Planning) -> list[Step]:
    from ..stages.plan import logged_propose_steps

    return logged_propose_steps(planning)


for _declared in (
    Stage("chunk", _chunk, _chunked, section="chunking", api=chunk, commands=("chunk", "index"), workspace=False),
    Stage("plan", _plan, api=plan),
    Stage(
        "synthesize", _synthesize, _made, _synthesize_plan, fell_short=_synthesize_short,
        cost_usd=lambda made: made.cost_usd, section="synthesize", api=synthesize, commands=("synthesize",),
    ),
    Stage(
        "propose", _propose, _proposed, _propose_plan, fell_short=lambda proposed: proposed.incomplete,
        cost_usd=lambda proposed: proposed.summary.judging.cost_usd, section="propose", api=propose,
        commands=("propose", "audit"),
    ),
    Stage(
        "import-logs", _import_logs, _imported, section="logs", api=import_logs,
        commands=("export-chunks", "import-logs"),
    ),
    Stage("select-logs", _select_logs, _drawn_logs, api=select_logs),
    Stage(
        "propose-logs", _propose_logs, _proposed, _propose_logs_plan, fell_short=lambda proposed: proposed.incomplete,
        cost_usd=lambda proposed: proposed.summary.judging.cost_usd, section="propose", api=propose,
    ),
    Stage("select", _select, _drawn, api=select, commands=("select", "queue")),
    Stage(
        "review", _review, section="review",
        commands=("add-reviewer", "reviewers", "serve", "review", "review-stats", "review-export", "review-import"),
    ),
    Stage("estimate", _estimate, _refit, api=estimate, commands=("estimate",)),
    Stage(
        "release", _release, _released, section="release", api=release,
        commands=("release", "diff", "export", "push", "import", "remap"),
    ),
    Stage(
        "report", _report, lambda reported: reported["report"], api=report, commands=("baseline", "report"),
        workspace=False,
    ),
):  # fmt: skip
    register_stage(_declared)
