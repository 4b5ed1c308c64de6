#!/usr/bin/env bash
# What `make demo` runs: `testset-builder run` on examples/demo.yaml (chunk the project's own docs, synthesize
# questions with the embedded local model, pool candidates for a few real-looking queries, release, score the
# baselines, write the HTML report), twice to show a rerun pays for nothing; a review draw; and score and compare
# the bundled example runs (the course's five-query labelled set).
set -euo pipefail
cli=${1:-testset-builder}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
workspace=${DEMO_WORKSPACE:-$root/demo-workspace}
echo "== run: the whole job from one config (examples/demo.yaml): chunk the project's docs, synthesize six questions with the local model, pool candidates for five real-looking queries (the relevance estimate, no LLM call), release, score the BM25 and dense baselines, write the report =="
"$cli" run "$here/demo.yaml" --workspace "$workspace" --no-review
echo "   (run it again: every stage skips what is done, nothing is paid twice, no new release)"
"$cli" run "$here/demo.yaml" --workspace "$workspace" --no-review
echo
echo "== select: a draw of pooled pairs for review with known probabilities; what a reviewer would look at first =="
"$cli" select --workspace "$workspace" --budget 5
"$cli" queue --workspace "$workspace" --limit 5
echo
echo "== score: one run against the example qrels (the course's five-query labelled set) =="
"$cli" score --qrels "$here/qrels.tsv" --run "$here/bm25.trec" --metrics recall@5,recall@10,precision@5,precision@10,mrr,ndcg@5,ndcg@10,hit_rate@5,map
echo
echo "== compare: dense vs bm25 (paired tests, Holm-corrected) =="
"$cli" compare --qrels "$here/qrels.tsv" "$here/bm25.trec" "$here/dense.trec" --metrics ndcg@10,recall@5,mrr
echo
echo "== review: the queue's proposals are waiting for a human; to review them in a browser, run =="
echo "   $cli serve --workspace $workspace      (or, in the terminal: $cli review --reviewer YOUR-NAME --workspace $workspace)"
echo
echo "== the CLI on your PATH: source .venv/bin/activate (or export PATH=\"$root/.venv/bin:\$PATH\"); then testset-builder --help =="
