"""The host imports the in-kernel package for its message shapes: that loads only the
standard library and patches nothing (checked in a fresh interpreter, so a subprocess:
not a unit test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dsh_jupyter.kernel import inject
from dsh_jupyter.kernel.inkernel import _loader, messages, program


def test_importing_the_inkernel_package_on_the_host_changes_nothing() -> None:
    """The host imports ``inkernel`` for its message shapes and names: that must load only
    the standard library (no ``comm``, ``zmq`` or IPython) and patch nothing."""
    directory = Path(_loader.__file__).parent
    probe = f"""\
import importlib.util, sys
before = set(sys.modules)
stdout_flush = sys.stdout.flush
spec = importlib.util.spec_from_file_location(
    "probe", {str(directory / "__init__.py")!r}, submodule_search_locations=[{str(directory)!r}])
module = importlib.util.module_from_spec(spec)
sys.modules["probe"] = module
spec.loader.exec_module(module)
for name in {list(_loader.MODULES[:-1])!r}:
    __import__("probe." + name)
loaded = set(sys.modules) - before
print(sorted(n for n in loaded if n.partition(".")[0] not in {*sys.stdlib_module_names, "probe"}))
print(sys.stdout.flush == stdout_flush)
"""
    done = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True,
                          check=True, timeout=30)
    assert done.stdout.split("\n")[:2] == ["[]", "True"]


def test_the_package_loads_from_its_sources_as_a_kernel_loads_it() -> None:
    probe = f"""\
import sys
namespace = {{}}
exec(compile({inject.loader_source()!r}, "<loader>", "exec"), namespace)
package = namespace["load"]("_probe_inkernel", {list(inject.inkernel_sources())!r},
                            {program.SOURCE_FILENAME!r})
assert package.start.__module__ == "_probe_inkernel.runner"
assert sys.modules["_probe_inkernel.messages"].TARGET_NAME == {messages.TARGET_NAME!r}
print(package.ToolCallError.__name__, package.runner.Runtime.execute.__code__.co_filename)
"""
    done = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True,
                          text=True, check=True, timeout=30)
    assert done.stdout.split() == ["ToolCallError", program.SOURCE_FILENAME]
