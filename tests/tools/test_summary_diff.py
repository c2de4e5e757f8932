"""The summary diff tool on two small hand-written summaries (every expected line is written out, not computed)."""

import json

import pytest

from tools.summary_diff import diff_summaries, format_diff, main


def _gap(figure, name, time, status, reason=None):
    why = None if reason is None else {"reason": reason, "evidence": "e", "kind": status}
    return {"figure": figure, "kind": "gap", "name": name, "time": time, "status": status, "explanation": why}


def _check(figure, name, status):
    return {"figure": figure, "kind": "check", "name": name, "time": None, "status": status, "explanation": None}


OLD = {
    "figures": [{"figure": "m.a"}, {"figure": "m.b"}],
    "rows": [
        _gap("m.a", "loss", 1.0, "holds"),
        _gap("m.a", "loss", 2.0, "holds"),  # same name, other time: a different row
        _check("m.a", "bound", "fails"),
        _check("m.b", "gone", "holds"),
    ],
}
NEW = {
    "figures": [{"figure": "m.a"}, {"figure": "m.c"}],
    "rows": [
        _gap("m.a", "loss", 1.0, "holds"),
        _gap("m.a", "loss", 2.0, "disagrees", reason="the plateau is longer than the paper's"),
        _check("m.a", "bound", "holds"),
        _check("m.c", "new", "deferred"),
        _check("m.c", "other", "consistent"),
    ],
}


def test_diff_lists_added_removed_changed_and_counts():
    d = diff_summaries(OLD, NEW)
    assert d["counts_before"] == {
        "holds": 3, "consistent": 0, "explained": 0, "disagrees": 0, "deferred": 0, "fails": 1
    }  # fmt: skip
    assert d["counts_after"] == {
        "holds": 2, "consistent": 1, "explained": 0, "disagrees": 1, "deferred": 1, "fails": 0
    }  # fmt: skip
    assert d["removed"] == [{"row": "m.b [check] gone", "status": "holds"}]
    assert d["added"] == [
        {"row": "m.c [check] new", "status": "deferred"},
        {"row": "m.c [check] other", "status": "consistent"},
    ]
    assert d["changed"] == [
        {
            "row": "m.a [gap] loss @ t=2",
            "before": "holds",
            "after": "disagrees",
            "cause": "the plateau is longer than the paper's",
        },
        {"row": "m.a [check] bound", "before": "fails", "after": "holds", "cause": None},
    ]
    assert d["figures_added"] == ["m.c"] and d["figures_removed"] == ["m.b"]


def test_identical_summaries_have_no_difference():
    d = diff_summaries(OLD, OLD)
    assert d["added"] == d["removed"] == d["changed"] == [] and d["counts_before"] == d["counts_after"]


def test_text_output_and_cli(tmp_path, capsys):
    text = format_diff(diff_summaries(OLD, NEW))
    assert "holds              3       2      -1" in text
    assert "fails              1       0      -1" in text
    assert "rows               4       5      +1" in text
    assert "  holds -> disagrees: m.a [gap] loss @ t=2  -- the plateau is longer than the paper's" in text
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(OLD))
    new.write_text(json.dumps(NEW))
    assert main([str(old), str(new)]) == 0
    assert capsys.readouterr().out.strip() == text
    assert main([str(old), str(new), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == diff_summaries(OLD, NEW)


def test_bad_input_is_named(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"figures": []}))
    assert main([str(bad), str(bad)]) == 2
    assert "has no 'rows' list" in capsys.readouterr().err
    dup = {"rows": [_check("m.a", "x", "holds"), _check("m.a", "x", "fails")]}
    with pytest.raises(ValueError, match="two rows named m.a \\[check\\] x"):
        diff_summaries(dup, OLD)
