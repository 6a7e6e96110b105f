"""What ``dsh-jupyter approvals`` prints, from the journal's records (pure: the command on a
real journal, in a real process: tests/integration/durable/test_approvals_cli.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from dsh_jupyter.durable import (
    ApprovalRecord,
    CallRecord,
    JournaledRun,
    PendingApproval,
    RunRecord,
)
from dsh_jupyter.durable.command import (
    ARGUMENTS_CHARS,
    add_arguments,
    answered_line,
    decision_line,
    format_age,
    pending_json,
    pending_table,
)
from dsh_jupyter.registry.policy import Approval

NOW = 1_800_000_000.0


def waiting(run_id: str, **fields: object) -> PendingApproval:
    values: dict[str, object] = {
        "run_id": run_id, "position": 2, "tool": "rm", "arguments": {"path": "a.csv"},
        "reason": "deletes a file", "asked": NOW - 180, "scope": None, "host": "41@box"}
    values.update(fields)
    return PendingApproval(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(("seconds", "said"), [
    (-30, "just now"), (0, "just now"), (0.9, "just now"), (1, "1 s ago"), (59.9, "59 s ago"),
    (60, "1 min ago"), (3599, "59 min ago"), (3600, "1 h ago"), (86399, "23 h ago"),
    (86400, "1 d ago"), (3 * 86400 + 5, "3 d ago"),
])
def test_ages_in_whole_units(seconds: float, said: str) -> None:
    assert format_age(seconds) == said


def test_the_table_has_a_line_per_run_in_aligned_columns() -> None:
    table = pending_table(
        [waiting("20261204T200905Z-3f9a1c2e"),
         waiting("r2", position=11, tool="send_mail", arguments={"to": "a@b.c"}, reason=None,
                 asked=NOW - 7200, host="7@box")],
        ["alive", "gone"], now=NOW)
    assert table.splitlines() == [
        "RUN                        CALL  TOOL       ARGUMENTS          REASON          "
        "ASKED      HOST",
        "20261204T200905Z-3f9a1c2e  2     rm         {\"path\": \"a.csv\"}  deletes a file  "
        "3 min ago  41@box (alive)",
        "r2                         11    send_mail  {\"to\": \"a@b.c\"}    -               "
        "2 h ago    7@box (gone)",
    ]


def test_cells_are_one_line_inert_and_shortened() -> None:
    table = pending_table(
        [waiting("r1", tool="rm\x1b[2J", arguments={"body": "é" * 200, "n": [1, 2]},
                 reason="deletes\nthe \u202efile\tnow " + "x" * 80, host="")],
        ["unknown"], now=NOW)
    header, line = table.splitlines()
    assert "\x1b" not in line and "\u202e" not in line and "\t" not in line
    assert "rm\\x1b[2J" in line
    arguments = line[header.index("ARGUMENTS"):header.index("REASON")].rstrip()
    assert len(arguments) == ARGUMENTS_CHARS and arguments.endswith("…")
    assert arguments.startswith('{"body": "éééé')  # readable, not \u00e9
    reason = line[header.index("REASON"):header.index("ASKED")].rstrip()
    assert reason.startswith("deletes the \\u202efile now xxx") and reason.endswith("…")
    assert line.endswith("? (unknown)")


def test_json_keeps_every_field_and_the_full_arguments() -> None:
    arguments = {"body": "x" * 500, "to": ["a", "b"]}
    [row] = pending_json([waiting("r1", arguments=arguments, scope="scope-9f",
                                  scope_name="analyst")], ["gone"])
    assert json.loads(json.dumps(row)) == {
        "run_id": "r1", "position": 2, "tool": "rm", "arguments": arguments,
        "reason": "deletes a file", "asked": NOW - 180, "scope": "scope-9f",
        "scope_name": "analyst", "host": "41@box", "host_state": "gone"}
    assert pending_json([], []) == []


def answer(approved: bool, note: str | None = None, *, for_run: bool = False) -> ApprovalRecord:
    return ApprovalRecord(position=2, reason="deletes a file", asked=NOW - 60,
                          decision=Approval(approved=approved, answered_by="cli", note=note,
                                            for_run=for_run),
                          answered=NOW - 30)


def test_the_decision_line_says_what_happens_next() -> None:
    assert decision_line("r1", answer(True), tool="rm", host="41@box", state="alive") == (
        "approved call 2 (rm) of run r1; its host 41@box is running: it picks the decision "
        'up if the run still waits there, else resume the run in that process: await '
        'registry.resume("r1")')
    assert decision_line("r1", answer(False, "not\ntoday"), tool="rm", host="41@box",
                         state="gone") == (
        'rejected call 2 (rm) of run r1, note "not\\ntoday"; its host 41@box is gone: resume '
        "the run with the same tools and this journal, in Python: "
        'await registry.resume("r1")')
    assert decision_line("r1", answer(True, for_run=True), tool="rm", host="41@box",
                         state="gone").startswith(
        "approved call 2 (rm) and every later rm call of run r1; its host 41@box is gone")
    assert decision_line("r1", answer(True), tool="rm", host="41@far", state="unknown") == (
        "approved call 2 (rm) of run r1; its host 41@far cannot be checked from here: if it "
        "still runs it picks the decision up, else resume the run with the same tools and "
        'this journal, in Python: await registry.resume("r1")')


def a_run(*approvals: ApprovalRecord) -> JournaledRun:
    return JournaledRun(
        run=RunRecord(run_id="r1", program="p", tools_fingerprint="f", call_id="c",
                      host="41@box"),
        status="decided", updated=NOW,
        calls=(CallRecord(position=1, tool="ls", arguments={}, state="done"),
               CallRecord(position=2, tool="rm", arguments={}, state="issued")),
        approvals=approvals)


def test_a_second_answer_is_told_who_answered_first() -> None:
    assert answered_line(a_run(answer(False, "no")), now=NOW) == (
        'run r1 was answered already: call 2 (rm) rejected by cli 30 s ago, note "no"; the '
        "run is decided")
    unanswered = ApprovalRecord(position=2, reason=None, asked=NOW)
    assert answered_line(a_run(unanswered), now=NOW) is None
    assert answered_line(a_run(), now=NOW) is None


def parser() -> argparse.ArgumentParser:
    built = argparse.ArgumentParser(prog="dsh-jupyter approvals")
    add_arguments(built)
    return built


def test_the_journal_comes_from_the_option_or_the_environment(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("DSH_JOURNAL", raising=False)
    with pytest.raises(SystemExit) as refused:
        parser().parse_args(["list"])
    assert refused.value.code == 2
    assert "the following arguments are required: --journal" in capsys.readouterr().err
    options = parser().parse_args(["approve", "r1", "--journal", "j.sqlite", "--note", "ok"])
    assert (options.action, options.run_id, options.journal, options.note,
            options.all_in_run) == ("approve", "r1", Path("j.sqlite"), "ok", False)
    assert parser().parse_args(["approve", "r1", "--journal", "j", "--all-in-run"]).all_in_run
    with pytest.raises(SystemExit):  # a rejection covers one call
        parser().parse_args(["reject", "r1", "--journal", "j", "--all-in-run"])

    monkeypatch.setenv("DSH_JOURNAL", "~/env.sqlite")
    assert parser().parse_args(["list"]).journal == Path("~/env.sqlite")
    assert parser().parse_args(["list", "--journal", "j.sqlite"]).journal == Path("j.sqlite")
    monkeypatch.setenv("DSH_JOURNAL", "")  # set but empty: not a path
    with pytest.raises(SystemExit):
        parser().parse_args(["reject", "r1"])
