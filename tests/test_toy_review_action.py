"""A kind of verdict added in one file: declared with register_action, it is taken by the JSON API, shown as a
button (and a key) on the page and in the terminal, stored, and counted towards an item's overlap only if declared
so; and the verdict table holds any declared action (migration 22 took its fixed list away, keeping every row)."""

from __future__ import annotations

import io
import sqlite3

import pytest

from testset_builder import review_actions
from testset_builder.review_actions import ReviewAction, register_action
from testset_builder.stages import review
from testset_builder.store import open_workspace
from testset_builder.store import review as store
from testset_builder.store.workspace import DB_NAME

TOKEN = "tok-" + "f" * 24


@pytest.fixture
def garbled():
    """A verdict for pairs whose chunk is unreadable (a broken PDF extraction): it does not grade the pair, so it
    counts towards no overlap, but the reviewer is done with the item."""
    declared = register_action(
        ReviewAction("flag_garbled", ("pair",), False, key="f", label="garbled text", help="the chunk is unreadable")
    )
    yield declared
    review_actions.ACTIONS.pop(declared.name, None)


def test_an_action_declared_in_one_place_is_taken_shown_and_stored(queued_workspace, garbled, monkeypatch, capsys):
    from fastapi.testclient import TestClient

    from testset_builder.cli import main
    from testset_builder.review_ui import create_app

    ws = queued_workspace
    with TestClient(create_app(ws, TOKEN)) as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        item = client.get("/api/next", params={"reviewer": "ann"}).json()
        flagged = {"item_id": item["item_id"], "reviewer": "ann", "action": "flag_garbled", "idempotency_key": "f-1"}
        assert client.post("/api/verdicts", json=flagged).status_code == 201
        unknown = {**flagged, "action": "flag_nonsense", "idempotency_key": "f-2"}
        assert client.post("/api/verdicts", json=unknown).status_code == 422
        client.cookies.set("tsb_reviewer", "bob")
        page = client.get("/review").text
        assert 'data-key="f"' in page and "garbled text (f)" in page and 'value="flag_garbled"' in page
        assert f'value="{item["item_id"]}"' in page  # bob is served it: a flag counts towards no overlap
    assert store.verdict_by_key(ws.db, "f-1").action == "flag_garbled"
    assert review.next_item(ws, "ann").item_id != item["item_id"]  # ann is done with it
    monkeypatch.setattr("sys.stdin", io.StringIO("f\nq\n"))
    assert main(["review", "--reviewer", "dan", "--workspace", str(ws.root)]) == 0
    assert "f garbled text" in capsys.readouterr().err  # the terminal offers its key
    assert store.verdicts_per_reviewer(ws.db)["dan"] == {"flag_garbled": 1}


def test_an_action_is_refused_for_items_it_does_not_answer_and_a_taken_key_is_refused(queued_workspace, garbled):
    from testset_builder.errors import InputError

    ws = queued_workspace
    review.queue_questions(ws)
    question = next(i for i in store.queued_items(ws.db, kind="question"))
    with pytest.raises(InputError, match="flag_garbled is for \\(query, chunk\\) pairs"):
        review.submit(ws, "ann", question.item_id, "flag_garbled", "q-1")
    with pytest.raises(ValueError, match="key 's' is taken"):
        register_action(ReviewAction("shelve", ("pair",), False, key="s"))
    with pytest.raises(ValueError, match="needs nothing or a reason"):  # a grade is what the built-in grade does
        register_action(ReviewAction("grade_unsure", ("pair",), True, "grade"))


def test_migration_22_keeps_every_verdict_and_the_log_stays_append_only(queued_workspace, tmp_path):
    ws = queued_workspace
    first = review.next_item(ws, "ann")
    review.submit(ws, "ann", first.item_id, "grade", "g-1", grade=2)
    review.undo(ws, "ann", "u-1")  # an undo: a verdict naming another
    review.submit(ws, "ann", first.item_id, "grade", "g-2", grade=1)
    before = ws.db.execute("SELECT * FROM review_verdicts ORDER BY verdict_id").fetchall()
    state = ws.db.execute("SELECT * FROM review_state ORDER BY item_id, reviewer").fetchall()
    ws.close()
    db = sqlite3.connect(ws.root / DB_NAME, isolation_level=None)  # taken back to schema 21: the old CHECK
    db.execute("PRAGMA foreign_keys = OFF")
    db.execute("PRAGMA legacy_alter_table = ON")  # review_state's references stay on review_verdicts
    db.execute("BEGIN")
    db.execute("ALTER TABLE review_verdicts RENAME TO review_verdicts_now")
    sql = db.execute("SELECT sql FROM sqlite_master WHERE name = 'review_verdicts_now'").fetchone()[0]
    old = sql.replace("review_verdicts_now", "review_verdicts").replace(
        "action TEXT NOT NULL,", "action TEXT NOT NULL CHECK (action IN ('grade', 'skip', 'keep_question', "
        "'drop_question', 'edit_question', 'undo')),"
    )  # fmt: skip
    db.execute(old.replace(", source_at TEXT", ""))  # a later migration's column, not there at schema 21
    columns = ", ".join(r[1] for r in db.execute("PRAGMA table_info(review_verdicts)"))
    db.execute(f"INSERT INTO review_verdicts SELECT {columns} FROM review_verdicts_now")
    db.execute("DROP TABLE review_verdicts_now")
    for name, verb in (("review_verdicts_no_update", "UPDATE"), ("review_verdicts_no_delete", "DELETE")):
        db.execute(f"CREATE TRIGGER {name} BEFORE {verb} ON review_verdicts BEGIN SELECT RAISE(ABORT, "
                   "'verdicts are append-only; an undo is a new verdict'); END")  # fmt: skip
    db.execute("DELETE FROM schema_migrations WHERE version >= 22")  # schema 21: the later migrations run again
    db.execute("COMMIT")
    with pytest.raises(sqlite3.IntegrityError):  # the fixed list refuses a new action
        db.execute("INSERT INTO review_verdicts SELECT 'x', item_id, 'bob', 'flag_garbled', NULL, NULL, NULL, NULL, "
                   "NULL, NULL, 'k-x', NULL, 'now' FROM review_items LIMIT 1")  # fmt: skip
    db.close()
    with open_workspace(ws.root) as again:  # migration 22 runs
        assert again.db.execute("SELECT * FROM review_verdicts ORDER BY verdict_id").fetchall() == before
        assert again.db.execute("SELECT * FROM review_state ORDER BY item_id, reviewer").fetchall() == state
        assert again.db.execute("PRAGMA foreign_key_check").fetchall() == []
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            again.db.execute("DELETE FROM review_verdicts")
        assert (
            "CHECK (action"
            not in again.db.execute("SELECT sql FROM sqlite_master WHERE name = 'review_verdicts'").fetchone()[0]
        )
