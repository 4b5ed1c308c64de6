"""Failure-first: which logged queries to label, the ones the live system likely got wrong first, each drawn with
a known probability.

A logged query weighs more the more its records say something went wrong, and the more often it was asked
(:mod:`~testset_builder.metrics.failure_signals`):

    w = (1 + 4 * thumbs-down share + 1.5 * share of cited answers nobody clicked + 1 if its mean rating is below
         the log's median + 1 if its top production score is in the log's lowest quarter + 1 if nothing was
         retrieved) * (1 + log2(frequency))

Near-duplicate queries (content words overlapping by Jaccard >= 0.8, as for synthetic questions) collapse into the
most frequent one, which carries their records' signals. Then the draw is the one ``select`` makes for pairs:
Poisson sampling with pi = min(1, u + c w), ``u`` spreading a fifth of the limit evenly, so a query no signal points
at is still possible and every pi is recorded: figures over the labelled subset (the logged system's recall, how
often a thumbs-down was a retrieval failure) weighted by 1 / pi describe the whole log without bias.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ...labels.design import draw, weighted_inclusion_probabilities
from ...metrics.failure_signals import failure_weight, signal_thresholds
from ...questions import NearDuplicates
from ...store import logs as stored_logs

SUMS = ("frequency", "thumbs_up", "thumbs_down", "rating_sum", "ratings", "cited", "clicked")


@dataclass
class LogSelectionSummary:
    round: int
    considered: int  # logged queries no earlier round had considered
    collapsed: int  # near-duplicates folded into another query
    drawn: int
    limit: int
    smallest_probability: float | None
    drawn_queries: list[dict] = field(default_factory=list)  # query id, text, probability, reasons

    def as_dict(self) -> dict:
        return asdict(self)


def collapse(logged: list[dict]) -> tuple[list[dict], dict[str, str]]:
    """Near-duplicate queries folded into the most frequent of them (``logged`` comes most frequent first): the
    representatives with their members' sums added, and member -> representative."""
    seen = NearDuplicates()
    representatives: list[dict] = []
    member_of: dict[str, str] = {}
    for row in logged:
        match = seen.duplicate_of(row["text"])
        if match is None:
            seen.add(row["text"])
            representatives.append(dict(row))
            continue
        head = representatives[match]
        member_of[row["query_id"]] = head["query_id"]
        for name in SUMS:
            head[name] = (head[name] or 0) + (row[name] or 0)
        if head["top_score"] is None:
            head["top_score"] = row["top_score"]
    return representatives, member_of


def select_logged(workspace, limit: int, uniform_share: float = 0.2, seed: int = 0) -> LogSelectionSummary:
    """Draw about ``limit`` of the logged queries no earlier round considered, failures likelier; record every
    considered query's probability (its near-duplicates share their representative's), drawn or not."""
    if limit < 1:
        raise ValueError("a limit is at least one query")
    with workspace.transaction() as db:
        logged = stored_logs.undrawn_logged(db)
        round_number = stored_logs.next_draw_round(db)
        representatives, member_of = collapse(logged)
        median_rating, low_score = signal_thresholds(representatives)
        weighed = [failure_weight(r, median_rating, low_score) for r in representatives]
        probabilities = weighted_inclusion_probabilities([w for w, _ in weighed], limit, uniform_share)
        outcome = draw(probabilities, seed * 1_000_003 + round_number)
        draws = [
            stored_logs.LogDraw(row["query_id"], round_number, d.probability, d.drawn, weight, tuple(reasons))
            for row, (weight, reasons), d in zip(representatives, weighed, outcome)
        ]
        by_id = {d.query_id: d for d in draws}
        draws += [
            stored_logs.LogDraw(member, round_number, by_id[head].probability, False, 0.0, (), head)
            for member, head in member_of.items()
        ]
        stored_logs.put_log_draws(db, draws)
    chosen = [(row, d) for row, d in zip(representatives, draws) if d.drawn]
    return LogSelectionSummary(
        round=round_number,
        considered=len(logged),
        collapsed=len(member_of),
        drawn=len(chosen),
        limit=limit,
        smallest_probability=float(probabilities.min()) if len(probabilities) else None,
        drawn_queries=[
            {
                "query_id": d.query_id,
                "text": row["text"],
                "probability": round(d.probability, 6),
                "reasons": list(d.reasons),
            }
            for row, d in chosen
        ],
    )


def drawn_queries(workspace):
    """The logged queries failure-first draws chose, as a query file for ``propose``."""
    from ...errors import InputError
    from ...export.queries import QueryFile
    from ...store import rows

    drawn = stored_logs.drawn_logged(workspace.db)
    if not drawn:
        raise InputError(
            "no logged query has been drawn: `testset-builder import-logs LOG` then `testset-builder select "
            "--from-logs --limit N` first",
            path=workspace.root,
        )
    return QueryFile(queries=[rows.get_query(workspace.db, query_id) for query_id, _, _ in drawn])
