"""``dsh-jupyter serve-mcp`` argument handling (no server started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh_jupyter import AgentScope, ToolRegistry
from dsh_jupyter.cli import load_tools, main


def test_token_without_http_is_refused() -> None:
    with pytest.raises(SystemExit, match="--token applies to --http"):
        main(["serve-mcp", "--tools", "serve_support:served_registry", "--token", "t"])


def test_bad_http_address_is_explained() -> None:
    with pytest.raises(SystemExit, match="HOST:PORT"):
        main(["serve-mcp", "--tools", "serve_support:served_registry", "--http", "host:port"])


def test_allow_host_without_http_is_refused() -> None:
    with pytest.raises(SystemExit, match="--allow-host applies to --http"):
        main(["serve-mcp", "--tools", "serve_support:served_registry",
              "--allow-host", "mcp.example.com"])


def test_a_bad_allowed_host_is_explained() -> None:
    with pytest.raises(SystemExit, match=r"serve-mcp: allowed host 'mcp\.example\.com:443': "
                                         r"expected a host name or an IP address"):
        main(["serve-mcp", "--tools", "serve_support:served_registry", "--http", "0",
              "--allow-host", "mcp.example.com:443"])


def test_tools_may_name_a_registry_or_a_scope_but_nothing_else() -> None:
    scope = load_tools("serve_support:served_scope")
    assert isinstance(scope, AgentScope) and scope.name == "analyst"
    assert isinstance(load_tools("serve_support:served_registry"), ToolRegistry)
    with pytest.raises(SystemExit, match="not a ToolRegistry or an AgentScope"):
        load_tools("serve_support:PIXEL")


@pytest.mark.parametrize(("argv", "message"), [
    ([], "one of the arguments --tools --wrap --wrap-url is required"),
    (["--tools", "m:a", "--wrap", "--", "srv"], "argument --wrap: not allowed with argument "
                                                "--tools"),
    (["--wrap-url", "http://127.0.0.1:1/mcp", "--wrap", "--", "srv"],
     "argument --wrap: not allowed with argument --wrap-url"),
    (["--wrap"], "--wrap needs the server's command after --, e.g. --wrap -- npx -y "
                 "@modelcontextprotocol/server-everything"),
    (["--tools", "m:a", "--", "npx", "srv"], "unexpected arguments 'npx srv': a stdio server "
                                             "to wrap goes after --wrap --"),
    (["--wrap-header", "A: b", "--wrap", "--", "srv"], "--wrap-header applies to --wrap-url"),
    (["--wrap-url", "http://127.0.0.1:1/mcp", "--wrap-header", "no colon"],
     "--wrap-header expects 'NAME: VALUE', got 'no colon'"),
])
def test_what_to_serve_is_checked_first(argv: list[str], message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve-mcp", *argv])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"dsh-jupyter serve-mcp: error: {message}"


@pytest.mark.parametrize("source", [["--tools", "serve_support:served_registry"],
                                    ["--wrap", "--", "no-server-is-started"]])
def test_a_bad_policy_file_stops_before_anything_starts(tmp_path: Path,
                                                        source: list[str]) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('deny = "git_reset"\n')
    # the unit tier's guard fails the test if a server or a kernel is started
    with pytest.raises(SystemExit) as exited:
        main(["serve-mcp", "--policy", str(policy), *source])
    assert str(exited.value.code) == (
        f"dsh-jupyter serve-mcp: policy file {policy}: deny must be a list of tool-name "
        "patterns, e.g. deny = [\"git_*\", \"write_file\"]; got the string 'git_reset'")


def test_help_shows_the_wrapping_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve-mcp", "--help"])
    text = capsys.readouterr().out
    assert "(--tools MODULE:ATTR | --wrap-url URL | --wrap) [options] [-- CMD [ARG ...]]" in text
    for option in ("--wrap ", "--wrap-url URL", "--wrap-header", "--policy FILE"):
        assert option in text
    assert "dsh-jupyter serve-mcp --wrap -- npx -y @modelcontextprotocol/server-filesystem" in text


def test_help_names_the_journal(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve-mcp", "--help"])
    assert exited.value.code == 0
    assert "--journal PATH" in capsys.readouterr().out


def test_a_journal_that_is_not_one_stops_the_start_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n" * 100)
    assert main(["serve-mcp", "--tools", "serve_support:served_registry", "--mode", "code",
                 "--journal", str(notes)]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line == (f"dsh-jupyter serve-mcp: error: the journal {notes} is unreadable (file "
                    f"is not a database): move the file away or choose another path")
    assert notes.read_text() == "not a database\n" * 100
