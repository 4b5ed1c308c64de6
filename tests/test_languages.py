"""Non-English corpora: the language is detected, BM25 cuts Chinese into bigrams and stems German and Arabic with
their own stemmers, the dataset card names the languages, and a query no index can match is warned about."""

from __future__ import annotations

import json

import pytest

from testset_builder.cli import main
from testset_builder.corpus.language import cjk_bigrams, corpus_languages, detect_language
from testset_builder.retrieval import BM25Index

CORPORA = {
    "zh": (
        [
            "检索评估比较系统找到的段落与人工判断的相关段落，召回率统计前十个结果中找到的相关段落。",
            "咖啡豆在烘焙过程中会失去水分，颜色由绿色变为棕色，风味也随之改变。",
            "图书馆的开放时间是周一至周五上午九点到下午六点，周末闭馆。",
        ],
        "烘焙咖啡豆的颜色会怎样变化",
        1,
    ),
    "de": (
        [
            "Die Bewertung einer Suchmaschine vergleicht die gefundenen Abschnitte mit den als relevant beurteilten.",
            "Die Häuser am Fluss wurden im letzten Jahrhundert aus rotem Backstein gebaut und später renoviert.",
            "Der Bahnhof der Stadt liegt nördlich des Zentrums und verbindet alle Regionalzüge miteinander.",
        ],
        "Aus welchem Stein ist das Haus am Fluss gebaut?",
        1,
    ),
    "ar": (
        [
            "يقارن تقييم الاسترجاع المقاطع التي وجدها النظام مع المقاطع التي حكم عليها الأشخاص بأنها ذات صلة.",
            "تفتح المكتبات العامة في المدينة أبوابها كل يوم من التاسعة صباحا حتى السادسة مساء.",
            "تنمو أشجار النخيل في المناطق الحارة وتحتاج إلى كميات كبيرة من الماء في فصل الصيف.",
        ],
        "متى تفتح مكتبة المدينة",
        1,
    ),
}


@pytest.mark.parametrize("language", sorted(CORPORA))
def test_the_language_is_detected_and_bm25_finds_the_answer_to_a_query_in_it(language):
    texts, query, answer = CORPORA[language]
    assert corpus_languages(texts) == [language] and detect_language(query) in (language, None)
    index = BM25Index([f"d{i}" for i in range(len(texts))], texts, language=language)
    ranked = index.search(["q"], [query], k=3).ranked_rows()
    assert next(ranked)[1] == f"d{answer}"


def test_chinese_runs_become_overlapping_bigrams_and_other_text_is_left_alone():
    assert cjk_bigrams("召回率 recall") == " 召回 回率  recall"
    assert cjk_bigrams("plain text") == "plain text"


def test_a_chinese_corpus_is_proposed_for_released_with_its_language_and_a_foreign_query_is_warned_about(
    tmp_path, capsys
):
    texts, query, _ = CORPORA["zh"]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"_id": f"d{i}", "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(texts))
    )
    queries = tmp_path / "queries.txt"
    queries.write_text(f"{query}\nwhen does the library open\n", encoding="utf-8")
    ws = str(tmp_path / "ws")
    assert main(["chunk", str(corpus), "--workspace", ws, "--chunker", "prechunked", "--json"]) == 0
    capsys.readouterr()
    args = ["propose", "--queries", str(queries), "--workspace", ws, "--retrievers", "bm25", "--no-judge", "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["languages"] == ["zh"] and len(report["no_results"]["bm25"]) == 1  # the English query
    assert main(args[:-1]) == 0
    assert "bm25 found nothing for 1 queries" in " ".join(capsys.readouterr().err.split())
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\n", encoding="utf-8")
    (tmp_path / "q.jsonl").write_text(
        json.dumps({"_id": "q1", "text": query}, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    assert (
        main(["import", str(qrels), "--queries", str(tmp_path / "q.jsonl"), "--workspace", ws, "--version", "1.0.0"])
        == 0
    )
    card = (tmp_path / "ws" / "releases" / "1.0.0" / "README.md").read_text(encoding="utf-8")
    assert "language:\n- zh\n" in card
