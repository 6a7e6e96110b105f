"""Stateful sessions on real kernels: what a program defines is there for the next run of
its session, and for no other session; reset, death, budgets and expiry end a session."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kernel_support import Bindings, RuntimeFactory
from waiting_support import eventually

from dsh_jupyter.json_value import JsonValue
from dsh_jupyter.kernel import KernelRuntime, StatefulConfig
from dsh_jupyter.runtime import CodeRunResult, FunctionBindings, RunRequest

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(90)]


async def echo(args: JsonValue) -> JsonValue:
    return args


def announcer(event: asyncio.Event) -> Bindings:
    """``tools.started({})``: a program says it is running (instead of the test sleeping
    until it probably is)."""

    async def started(args: JsonValue) -> JsonValue:
        event.set()
        return None

    return {"started": started}


async def run_in(runtime: KernelRuntime, session: str | None, program: str,
                 bindings: Bindings | None = None) -> CodeRunResult:
    return await runtime.run(RunRequest(program, FunctionBindings(bindings or {}), session=session))


def ok(result: CodeRunResult) -> JsonValue:
    assert result.failure is None, result.failure
    return result.value


@pytest.mark.parametrize("carrier", ["comm", "socket"])
async def test_program_two_uses_what_program_one_defined(make_runtime: RuntimeFactory,
                                                          carrier: str) -> None:
    runtime = await make_runtime(carrier=carrier, stateful=StatefulConfig(), pool_size=1)
    first = await run_in(runtime, "a", (
        "import statistics as stats\n"
        "rows: list = await tools.load({'n': 3})\n"
        "def total(values):\n    return sum(values)\n"
        "class Box:\n    size = 2\n"
        "for i in range(3):\n    pass\n"
        "return len(rows)"), {"load": lambda args: echo([1, 2, 3])})
    assert ok(first) == 3
    assert first.facts["session.new"] is True and first.facts["session.run_index"] == 1
    # The second run has other tools: its program still sees the first one's names.
    second = await run_in(runtime, "a", (
        "rows.append(await tools.echo({'v': 4}))\n"
        "return [total(rows[:3]), stats.mean(rows[:3]), Box.size, i, 'load' in tools]"),
        {"echo": echo})
    assert ok(second) == [6, 2, 2, 2, False]
    assert second.facts["session.new"] is False and second.facts["session.run_index"] == 2
    assert second.facts["kernel.source"] == "session"
    assert [s.key for s in runtime.sessions] == ["a"] and runtime.sessions[0].runs == 2


async def test_a_program_that_raises_keeps_what_it_defined_before(
        make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(stateful=StatefulConfig())
    failed = await run_in(runtime, "a", "x = 1\nraise ValueError('late')")
    assert failed.failure is not None and failed.failure.kind == "exception"
    assert "ValueError: late" in failed.failure.message and "lost" not in failed.failure.message
    assert ok(await run_in(runtime, "a", "return x")) == 1


async def test_reset_clears_the_session(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(stateful=StatefulConfig())
    ok(await run_in(runtime, "a", "x = 41"))
    assert await runtime.reset("a") is True
    assert runtime.sessions == ()
    again = await run_in(runtime, "a", "return 'x' in globals()")
    assert ok(again) is False and again.facts["session.new"] is True
    assert await runtime.reset("never-opened") is False
    with pytest.raises(TypeError, match=r"scope\.session_key"):
        await runtime.reset(object())  # type: ignore[arg-type]


async def test_reset_during_a_run_fails_it_and_says_the_state_is_lost(
        make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(stateful=StatefulConfig())
    ok(await run_in(runtime, "a", "x = 1"))
    started = asyncio.Event()
    running = asyncio.ensure_future(run_in(
        runtime, "a", "await tools.started({})\nawait asyncio.sleep(30)", announcer(started)))
    await asyncio.wait_for(started.wait(), 30)
    assert await runtime.reset("a") is True
    result = await running
    assert result.failure is not None and result.failure.kind == "kernel-exit"
    assert result.failure.message.startswith("the session was reset while the program ran; ")
    assert "variables and imports of its earlier runs are lost" in result.failure.message


async def test_sessions_are_separate_even_when_running_at_once(
        make_runtime: RuntimeFactory) -> None:
    """Two sessions' programs run concurrently; the second looks for the first's variables,
    files (at the same paths) and processes, from inside its own program."""
    runtime = await make_runtime(stateful=StatefulConfig(), pool_size=2)
    wrote: asyncio.Future[JsonValue] = asyncio.get_running_loop().create_future()
    read = asyncio.Event()

    async def on_wrote(args: JsonValue) -> JsonValue:
        wrote.set_result(args)
        return None

    async def hold(args: JsonValue) -> JsonValue:  # a runs until b has read
        await read.wait()
        return None

    writer = asyncio.ensure_future(run_in(runtime, "a", (
        "import os, pathlib\n"
        "secret = 'a-only'\n"
        "place = pathlib.Path(os.environ['HOME'], 'a-file')\n"
        "place.write_text(secret)\n"
        "here = pathlib.Path('a-cwd-file').resolve()\n"
        "here.write_text(secret)\n"
        "await tools.wrote({'files': [str(place), str(here)]})\n"
        "await tools.hold({})\n"
        "return 'done'"), {"wrote": on_wrote, "hold": hold}))
    written = await asyncio.wait_for(wrote, 30)
    assert isinstance(written, dict)
    reader = await run_in(runtime, "b", (
        "import os\n"
        f"files = {written['files']!r}\n"
        "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "return ['secret' in globals(), 'place' in globals(),\n"
        "        [os.path.exists(f) for f in files], len(pids)]"))
    seen = ok(reader)
    assert isinstance(seen, list) and not writer.done()  # b ran while a was running
    read.set()
    assert seen[:3] == [False, False, [False, False]]
    if runtime.confined:  # its own processes only
        assert isinstance(seen[3], int) and seen[3] < 10, seen
    assert ok(await writer) == "done"
    again = await run_in(runtime, "a", "return [secret, place.read_text()]")
    assert ok(again) == ["a-only", "a-only"]
    assert {s.key for s in runtime.sessions} == {"a", "b"}


async def test_a_kernel_death_ends_the_session(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(stateful=StatefulConfig())
    ok(await run_in(runtime, "a", "x = 1"))
    died = await run_in(runtime, "a", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert died.failure is not None and died.failure.kind == "kernel-exit"
    assert "\n" not in died.failure.message
    assert died.failure.message.endswith(
        "this conversation's kernel was stopped, so the variables and imports of its earlier "
        "runs are lost: the next run starts a fresh kernel")
    assert runtime.sessions == ()
    fresh = await run_in(runtime, "a", "return 'x' in globals()")
    assert ok(fresh) is False
    assert fresh.facts["session.new"] is True and fresh.facts["session.run_index"] == 1


async def test_a_kernel_that_died_between_runs_fails_the_next_one_clearly(
        make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(stateful=StatefulConfig())
    ok(await run_in(runtime, "a", (
        "import os, signal, threading\n"
        "threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGKILL)).start()")))
    kept = runtime._sessions._open["a"].kernel  # type: ignore[union-attr]
    assert kept is not None

    async def died() -> bool:
        return not await kept.process.is_alive()

    await eventually(died)
    late = await run_in(runtime, "a", "return 1")
    assert late.failure is not None and late.failure.kind == "kernel-exit"
    assert "since the last run; this conversation's kernel was stopped" in late.failure.message
    assert ok(await run_in(runtime, "a", "return 2")) == 2


async def test_a_timeout_ends_the_session(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(stateful=StatefulConfig(), wall_seconds=1.0)
    ok(await run_in(runtime, "a", "x = 1"))
    slow = await run_in(runtime, "a", "await asyncio.sleep(10)")
    assert slow.failure is not None and slow.failure.kind == "timeout"
    assert slow.failure.message.startswith("the program passed its wall-clock budget of 1 s; ")
    assert ok(await run_in(runtime, "a", "return 'x' in globals()")) is False


async def test_a_session_has_a_run_budget(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(stateful=StatefulConfig(max_runs=2))
    ok(await run_in(runtime, "a", "x = 1"))
    ok(await run_in(runtime, "a", "x += 1"))
    over = await run_in(runtime, "a", "return x")
    assert over.failure is not None and over.failure.kind == "session-limit"
    assert over.failure.message == (
        "this conversation's kernel has served its 2 runs (max_runs): ask the user to reset "
        "the session, which clears its variables")
    assert [s.runs for s in runtime.sessions] == [2]  # still open: the user decides
    await runtime.reset("a")
    assert ok(await run_in(runtime, "a", "return 'x' in globals()")) is False


async def test_a_session_has_a_compute_budget(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(stateful=StatefulConfig(total_compute_seconds=1.0))
    ok(await run_in(runtime, "a", "x = 1"))
    burn = await run_in(runtime, "a", "while True:\n    pass")
    assert burn.failure is not None and burn.failure.kind == "timeout"
    assert burn.failure.message.startswith(
        "the program passed what was left of this session's total compute budget of 1 s of "
        "CPU time; this conversation's kernel was stopped")
    assert ok(await run_in(runtime, "a", "return 'x' in globals()")) is False


async def test_idle_sessions_expire(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(stateful=StatefulConfig(idle_seconds=0.5))
    ok(await run_in(runtime, "a", "x = 1"))
    assert [s.key for s in runtime.sessions] == ["a"]
    await eventually(lambda: not runtime.sessions, seconds=10)
    later = await run_in(runtime, "a", "return 'x' in globals()")
    assert ok(later) is False and later.facts["session.new"] is True


async def test_open_sessions_are_limited(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(stateful=StatefulConfig(max_sessions=1, idle_seconds=60))
    ok(await run_in(runtime, "a", "x = 1"))
    refused = await run_in(runtime, "b", "return 1")
    assert refused.failure is not None and refused.failure.kind == "session-limit"
    assert refused.failure.message == ("1 stateful sessions are open, the limit "
                                       "(max_sessions=1): reset one or wait until one is "
                                       "idle for 60 s")
    assert ok(await run_in(runtime, "a", "return x")) == 1


async def test_runs_of_one_session_take_turns(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(stateful=StatefulConfig())
    ok(await run_in(runtime, "a", "log = []"))
    step = "log.append('{0} in')\nawait asyncio.sleep(0.3)\nlog.append('{0} out')\nreturn log"
    one, two = await asyncio.gather(run_in(runtime, "a", step.format(1)),
                                    run_in(runtime, "a", step.format(2)))
    assert ok(one) == ["1 in", "1 out"]  # the same list: the second run appended later
    assert ok(two) == ["1 in", "1 out", "2 in", "2 out"]


async def test_runs_without_a_key_and_stateless_runtimes_stay_fresh(
        make_runtime: RuntimeFactory) -> None:
    stateful = await make_runtime(stateful=StatefulConfig())
    ok(await run_in(stateful, None, "x = 1"))
    loose = await run_in(stateful, None, "return 'x' in globals()")
    assert ok(loose) is False and "session.new" not in loose.facts
    assert stateful.sessions == ()
    stateless = await make_runtime()
    assert stateless.stateful is False and stateful.stateful is True
    ok(await run_in(stateless, "a", "x = 1"))
    assert ok(await run_in(stateless, "a", "return 'x' in globals()")) is False


async def test_closing_the_runtime_ends_its_sessions(make_runtime: RuntimeFactory) -> None:
    runtime = await make_runtime(stateful=StatefulConfig())
    ok(await run_in(runtime, "a", "x = 1"))
    kept = runtime._sessions._open["a"].kernel  # type: ignore[union-attr]
    assert kept is not None and await kept.process.is_alive()
    await runtime.aclose()
    assert runtime.sessions == ()
    assert not await kept.process.is_alive()
    assert not kept.workspace.root.exists()


def test_bad_stateful_settings_are_refused() -> None:
    from dsh_jupyter.kernel import KernelRuntimeConfig

    with pytest.raises(ValueError, match="idle_seconds must be a finite number > 0, not 0"):
        StatefulConfig(idle_seconds=0)
    with pytest.raises(ValueError, match="max_sessions must be an int >= 1"):
        StatefulConfig(max_sessions=0)
    with pytest.raises(ValueError, match="stateful must be a StatefulConfig or None, not bool"):
        KernelRuntimeConfig(stateful=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="session must be a non-empty string"):
        FunctionBindings({}, session="")


async def test_an_abort_ends_the_session_and_a_waiting_run_can_be_aborted(
        make_runtime: RuntimeFactory) -> None:
    from dsh_jupyter.abort import AbortController

    runtime = await make_runtime(stateful=StatefulConfig())
    ok(await run_in(runtime, "a", "x = 1"))
    stop_running, stop_waiting = AbortController(), AbortController()
    started = asyncio.Event()
    running = asyncio.ensure_future(runtime.run(
        RunRequest("await tools.started({})\nawait asyncio.sleep(30)",
                   FunctionBindings(announcer(started)), stop_running.signal, session="a")))
    await asyncio.wait_for(started.wait(), 30)  # it holds the session: the next run waits
    waiting = asyncio.ensure_future(runtime.run(
        RunRequest("return x", FunctionBindings({}), stop_waiting.signal, session="a")))
    turn = runtime._sessions._open["a"].lock  # type: ignore[union-attr]
    await eventually(lambda: turn._waiters)  # the second run waits for its turn
    stop_waiting.abort("the user gave up waiting")
    gave_up = await waiting
    assert gave_up.failure is not None and gave_up.failure.kind == "abort"
    assert gave_up.failure.message == "the user gave up waiting"
    assert not running.done()
    stop_running.abort("stopped by the user")
    stopped = await running
    assert stopped.failure is not None and stopped.failure.kind == "abort"
    assert stopped.failure.message.startswith("stopped by the user; this conversation's kernel")
    assert runtime.sessions == ()


async def test_a_session_collects_each_runs_new_files_and_keeps_its_inputs(
        make_runtime: RuntimeFactory, tmp_path: Path) -> None:
    """Files in and out hold in a kept kernel too: every run reads the read-only inputs,
    and each run's result carries the files under ``outputs/`` it wrote or changed."""
    (tmp_path / "data.txt").write_text("1 2 3")
    runtime = await make_runtime(stateful=StatefulConfig(),
                                 inputs={"data.txt": tmp_path / "data.txt"})
    first = await run_in(runtime, "a", (
        "import os\nos.makedirs('outputs', exist_ok=True)\n"
        "numbers = [int(n) for n in open('inputs/data.txt').read().split()]\n"
        "open('outputs/a.txt', 'w').write(str(sum(numbers)))\n"
        "open('outputs/b.txt', 'w').write('same')\nreturn len(numbers)"))
    assert ok(first) == 3
    assert {f.name: f.data for f in first.files} == {"a.txt": b"6", "b.txt": b"same"}
    second = await run_in(runtime, "a", (
        "open('outputs/a.txt', 'w').write(str(sum(numbers) * 2))\n"
        "try:\n    open('inputs/data.txt', 'w')\nexcept OSError as error:\n"
        "    return type(error).__name__"))
    assert ok(second) == "OSError" or runtime.confined is False
    # Only what this run changed: b.txt is as the first run left it.
    assert {f.name: f.data for f in second.files} == {"a.txt": b"12"}
    assert (tmp_path / "data.txt").read_text() == "1 2 3"


async def test_a_kernel_that_stays_busy_after_a_result_ends_the_session_and_says_so(
        make_runtime: RuntimeFactory) -> None:
    """The program returned, but its kernel did not go idle (a callback it left blocks the
    loop): the kernel cannot be kept, and the run's own logs tell the model so, rather
    than the next program meeting a NameError with no reason given."""
    runtime = await make_runtime(stateful=StatefulConfig())
    busy = await run_in(runtime, "a", (
        "import time\nasyncio.get_running_loop().call_soon(time.sleep, 5)\n"
        "x = 1\nreturn x"))
    assert ok(busy) == 1
    assert busy.logs[-1].startswith("(dsh-jupyter: the kernel did not go idle after this run;")
    assert "variables and imports of its earlier runs are lost" in busy.logs[-1]
    after = await run_in(runtime, "a", "return 'x' in globals()")
    assert ok(after) is False and after.facts["session.new"] is True
