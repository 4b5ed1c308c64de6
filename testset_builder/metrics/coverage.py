"""Coverage of production traffic: how much of what users ask has a test question on its subject, and which
subjects to write questions for next.

Queries and test questions (synthetic or real labelled) are points in one embedding space, L2-normalised, so the
dot product is the cosine similarity. A logged query is covered when some test question lies within
:data:`SAME_TOPIC` of it. The shares are over the distinct logged queries and over the traffic (each query
weighted by how often it was asked), and the same over the likely failures (queries whose records signal a
failure, :mod:`.failure_signals`).

Topics are clusters of the logged queries: leader clustering (Hartigan 1975) in the order of frequency, each
query joining the most similar topic leader within :data:`SAME_TOPIC`, else leading a topic of its own. So a
topic is named by its most asked query, and every member is on the leader's subject. "Generate for these next"
lists the topics with the most uncovered traffic, each with its most asked uncovered queries as examples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

# Questions on one subject in other words sit above it, questions on neighbouring subjects of one product below it,
# as all-MiniLM-L6-v2 (the dense encoder) places them. A duplicate question is stricter (sentence-transformers'
# paraphrase mining takes 0.75), and a topic is wider than a duplicate.
SAME_TOPIC = 0.55
TOPICS_SHOWN = 10  # topics listed under "generate for these next"
EXAMPLES = 3  # example queries a topic shows
BLOCK = 2048  # query rows compared with the test questions at a time


@dataclass
class Topic:
    """A topic of the logged queries with uncovered traffic: its most asked uncovered queries, and counts."""

    examples: list[str]
    queries: int  # distinct logged queries in it
    traffic: int  # their records
    uncovered_queries: int
    uncovered_traffic: int
    uncovered_failures: int  # records of likely failures in it that no test question covers

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class TrafficCoverage:
    threshold: float
    test_questions: int
    logged_queries: int
    traffic: int  # records: the queries weighted by frequency
    covered_queries: int
    covered_traffic: int
    failed_queries: int
    failed_traffic: int
    covered_failed_queries: int
    covered_failed_traffic: int
    topics: int
    uncovered_topics: int  # topics none of whose queries has a test question near
    generate_next: list[Topic] = field(default_factory=list)

    @property
    def traffic_share(self) -> float | None:
        return self.covered_traffic / self.traffic if self.traffic else None

    @property
    def failure_share(self) -> float | None:
        return self.covered_failed_traffic / self.failed_traffic if self.failed_traffic else None

    def as_dict(self) -> dict:
        document = asdict(self)
        return {**document, "traffic_share": self.traffic_share, "failure_share": self.failure_share}


def nearest_similarity(queries: np.ndarray, questions: np.ndarray) -> np.ndarray:
    """Each query's cosine similarity to its nearest test question (-1 with no test question), a block at a time."""
    best = np.full(len(queries), -1.0)
    if len(questions) == 0:
        return best
    for start in range(0, len(queries), BLOCK):
        best[start : start + BLOCK] = (queries[start : start + BLOCK] @ questions.T).max(axis=1)
    return best


def leader_topics(vectors: np.ndarray, order: Sequence[int], threshold: float = SAME_TOPIC) -> np.ndarray:
    """Each vector's topic (numbered by leader, in ``order``): taken in ``order``, a vector joins the most similar
    leader within ``threshold``, else leads a new topic."""
    topic = np.full(len(vectors), -1, dtype=np.int64)
    leaders = np.empty_like(vectors)  # the first ``count`` rows are the leaders
    count = 0
    for index in order:
        vector = vectors[index]
        if count:
            similarity = leaders[:count] @ vector
            nearest = int(similarity.argmax())
            if similarity[nearest] >= threshold:
                topic[index] = nearest
                continue
        topic[index], leaders[count] = count, vector
        count += 1
    return topic


def traffic_coverage(
    texts: Sequence[str],
    vectors: np.ndarray,
    frequency: Sequence[int],
    failed: Sequence[bool],
    questions: np.ndarray,
    threshold: float = SAME_TOPIC,
    shown: int = TOPICS_SHOWN,
    examples: int = EXAMPLES,
) -> TrafficCoverage:
    """The coverage of the logged queries (``texts``, their embeddings ``vectors``, how often each was asked, whether
    each is a likely failure) by the test questions embedded as ``questions``; see the module docstring."""
    vectors, questions = np.asarray(vectors, dtype=np.float32), np.asarray(questions, dtype=np.float32)
    counts, failing = np.asarray(frequency, dtype=np.int64), np.asarray(failed, dtype=bool)
    covered = nearest_similarity(vectors, questions) >= threshold
    order = sorted(range(len(texts)), key=lambda i: (-counts[i], texts[i]))
    topic = leader_topics(vectors, order, threshold) if len(texts) else np.zeros(0, dtype=np.int64)
    groups: dict[int, list[int]] = {}
    for index in order:  # members most asked first
        groups.setdefault(int(topic[index]), []).append(index)
    gaps = []
    for members in groups.values():
        open_ = [i for i in members if not covered[i]]
        if not open_:
            continue
        gaps.append(
            Topic(
                examples=[texts[i] for i in open_[:examples]],
                queries=len(members),
                traffic=int(counts[members].sum()),
                uncovered_queries=len(open_),
                uncovered_traffic=int(counts[open_].sum()),
                uncovered_failures=int(counts[[i for i in open_ if failing[i]]].sum()),
            )
        )
    gaps.sort(key=lambda t: (-t.uncovered_traffic, -t.uncovered_failures, t.examples[0]))
    return TrafficCoverage(
        threshold=threshold,
        test_questions=len(questions),
        logged_queries=len(texts),
        traffic=int(counts.sum()),
        covered_queries=int(covered.sum()),
        covered_traffic=int(counts[covered].sum()),
        failed_queries=int(failing.sum()),
        failed_traffic=int(counts[failing].sum()),
        covered_failed_queries=int((covered & failing).sum()),
        covered_failed_traffic=int(counts[covered & failing].sum()),
        topics=len(groups),
        uncovered_topics=sum(not any(covered[i] for i in members) for members in groups.values()),
        generate_next=gaps[:shown],
    )


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def traffic_coverage_lines(found: dict) -> list[str]:
    """The coverage (``TrafficCoverage.as_dict()``, with the ``sample`` and ``encoder`` the release noted) in a few
    lines for the terminal."""
    if found.get("unavailable"):
        return [f"production traffic covered: not measured ({found['unavailable']})"]
    sampled = found.get("sampled_from")
    of = f", estimated on a random {found['logged_queries']:,} of {sampled:,} logged queries" if sampled else ""
    lines = [
        f"production traffic covered (a test question within cosine {found['threshold']} of the query{of}): "
        f"{_share(found['covered_traffic'], found['traffic'])} of {found['traffic']:,} requests "
        f"({found['covered_queries']:,} of {found['logged_queries']:,} distinct queries); likely failures "
        f"{_share(found['covered_failed_traffic'], found['failed_traffic'])} of {found['failed_traffic']:,} requests"
    ]
    if found["generate_next"]:
        lines.append(
            f"generate for these next ({found['uncovered_topics']} of {found['topics']} topics have no test question; "
            "the most uncovered traffic first):"
        )
        for number, topic in enumerate(found["generate_next"], 1):
            quoted = "; ".join(f'"{text}"' for text in topic["examples"])
            failures = f", {topic['uncovered_failures']} likely failures" if topic["uncovered_failures"] else ""
            lines.append(
                f"  {number}. {topic['uncovered_traffic']:,} requests uncovered, {topic['uncovered_queries']} "
                f"queries{failures}: {quoted}"
            )
    return lines
