"""A kernel whose ipykernel is older than 7.4, for real: the model gets one readable line.

The fixture installs ``ipykernel==6.29.5`` (and ``nest_asyncio``, which 6.x needs and 7.x
does not) with pip into a temporary directory, without dependencies: everything else the
kernel imports is this environment's own. A kernelspec runs this Python with that
directory first on ``sys.path``. It takes a few seconds where the package registry (or a
local wheel mirror) answers; where pip cannot get the package, the test is skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_support import RuntimeFactory, run

from dsh_jupyter.codemode.run_code import failure_message

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(120)]

OLD_IPYKERNEL = "6.29.5"


@pytest.fixture(scope="session")
def old_ipykernel_specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A ``JUPYTER_PATH`` directory with the kernelspec ``dsh-old-ipykernel``."""
    root = tmp_path_factory.mktemp("old-ipykernel")
    packages = root / "site"
    try:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
             "--disable-pip-version-check", "--no-input", "--target", str(packages),
             f"ipykernel=={OLD_IPYKERNEL}", "nest_asyncio"],
            check=True, capture_output=True, text=True, timeout=90)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
        output = getattr(error, "stderr", None) or ""
        pytest.skip(f"pip could not install ipykernel=={OLD_IPYKERNEL} "
                    f"(no package registry?): {output.strip()[-300:]}")
    launch = (f"import sys; sys.path.insert(0, {str(packages)!r}); import runpy; "
              "runpy.run_module('ipykernel_launcher', run_name='__main__', alter_sys=True)")
    spec_dir = root / "kernels" / "dsh-old-ipykernel"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-c", launch, "-f", "{connection_file}"],
        "display_name": f"ipykernel {OLD_IPYKERNEL}", "language": "python"}))
    yield root


async def test_an_old_ipykernel_is_one_readable_line(
        make_runtime: RuntimeFactory, old_ipykernel_specs: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_PATH", str(old_ipykernel_specs))
    # Unconfined: a confined kernel would not see the package directory under /tmp.
    runtime = await make_runtime(kernel_name="dsh-old-ipykernel", sandbox=None)
    found = await run(runtime, "import ipykernel\nreturn ipykernel.__version__")
    assert found.failure is not None and found.failure.kind == "kernel-exit"
    message = failure_message(found)  # what the model reads
    assert "\n" not in message and "\x1b" not in message and "Traceback" not in message
    assert "needs ipykernel >= 7.4" in message and f"(found {OLD_IPYKERNEL})" in message
    assert len(message) < 300, message
