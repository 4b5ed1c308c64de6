"""A script (run in a process of its own by test_api.py): the whole pipeline from Python through
``testset_builder.api`` alone, with a scripted model in place of the provider; prints one JSON document of what it
saw, including every ``testset_builder.cli`` module the process imported (there should be none)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_provider import FakeProvider, demo_config, stand_in_model

import testset_builder.llm.roles as roles
from testset_builder import api
from testset_builder.stages import review

root = Path(sys.argv[1])
docs = Path(__file__).resolve().parents[1] / "examples" / "corpus"
roles.make_provider = lambda config: FakeProvider(stand_in_model())  # the one stand-in: no network, no key
config = api.load_config(
    demo_config(),
    workspace=root / "ws",
    run__sources=[str(docs)],
    run__queries=str(Path(__file__).resolve().parents[1] / "examples" / "queries.txt"),
    run__review_budget=4,
    run__baselines=["bm25"],
)
seen: list[str] = []
first = api.run(config, on_stage=lambda name, result: seen.append(name))
answered = graded = 0
with api.open_workspace(config) as ws:
    while (item := review.next_item(ws, "ann")) is not None:  # the reviewer's verdicts, through the review stage
        if item.kind == "question":  # a synthetic question drawn for audit: kept as written
            review.submit(ws, "ann", item.item_id, "keep_question", f"k-{answered}")
        else:
            review.submit(ws, "ann", item.item_id, "grade", f"k-{answered}", grade=answered % 3)
            graded += 1
        answered += 1
second = api.run(config)
scored = api.score(f"{config.workspace}@{second.release}", second.baselines[0], "recall@10,ndcg@10")
print(
    json.dumps(
        {
            "first": first.as_dict(),
            "seen": seen,
            "answered": answered,
            "graded": graded,
            "second": second.as_dict(),
            "report_exists": Path(second.report).exists(),
            "recall": scored.metrics["recall@10"]["mean"],
            "cli_modules": sorted(m for m in sys.modules if m.startswith("testset_builder.cli")),
        }
    )
)
