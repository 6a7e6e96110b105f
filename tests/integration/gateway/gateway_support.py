"""A real Jupyter Kernel Gateway on 127.0.0.1 for tests and ``bench/kernel.py --gateway``.

:func:`start_gateway` runs ``jupyter kernelgateway`` from this venv on a free
port with token auth (the token travels in ``KG_AUTH_TOKEN``, not on the
command line), in a directory of its own (runtime, config and data dirs, the
kernels' working directory, HOME and IPYTHONDIR, which it passes on to its
kernels). :meth:`LocalGateway.stop` stops it by PID.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from runtime_support import RuntimeFactory

from dsh_jupyter.kernel.gateway_config import GatewayConfig

GATEWAY_BIN = Path(sys.executable).parent / "jupyter-kernelgateway"


@dataclass(slots=True)
class LocalGateway:
    url: str
    token: str
    directory: Path
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def config(self, **options: object) -> GatewayConfig:
        """A :class:`GatewayConfig` for this gateway (``options`` override fields)."""
        settings: dict[str, object] = {"url": self.url, "token": self.token,
                                       "liveness_seconds": 0.5}
        settings.update(options)
        return GatewayConfig(**settings)  # type: ignore[arg-type]

    def kernel_ids(self) -> list[str]:
        response = httpx.get(f"{self.url}/api/kernels", headers=self.headers, timeout=10)
        response.raise_for_status()
        return [kernel["id"] for kernel in response.json()]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def log(self) -> str:
        return (self.directory / "gateway.log").read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM (the gateway shuts its kernels down), SIGKILL after 10 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_gateway(directory: Path, *, extra_args: tuple[str, ...] = (),
                  seconds: float = 60.0) -> LocalGateway:
    """Start a Kernel Gateway in ``directory`` and wait until it answers with our token."""
    directory.mkdir(parents=True, exist_ok=True)
    home = directory / "home"
    (home / ".ipython").mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    env = {key: value for key, value in os.environ.items() if not key.startswith("JUPYTER")}
    env.update({
        "KG_AUTH_TOKEN": token,
        "JUPYTER_RUNTIME_DIR": str(directory / "runtime"),
        "JUPYTER_CONFIG_DIR": str(directory / "config"),
        "JUPYTER_DATA_DIR": str(directory / "data"),
        "HOME": str(home),
        "IPYTHONDIR": str(home / ".ipython"),
        # what this gateway hands on to its kernels besides PATH and KERNEL_*
        "KG_ENV_PROCESS_WHITELIST": "HOME,IPYTHONDIR,LANG",
        "KG_LIST_KERNELS": "True",
    })
    for attempt in range(3):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with (directory / "gateway.log").open("ab") as log:
            process = subprocess.Popen(
                [str(GATEWAY_BIN), "--KernelGatewayApp.ip=127.0.0.1",
                 f"--KernelGatewayApp.port={port}", "--KernelGatewayApp.port_retries=0",
                 *extra_args],
                cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)
        gateway = LocalGateway(url=url, token=token, directory=directory, process=process)
        if _wait_answering(gateway, seconds):
            return gateway
        gateway.stop()
        if attempt == 2:
            break
    raise RuntimeError(f"the kernel gateway did not start:\n{gateway.log()[-3000:]}")


def _wait_answering(gateway: LocalGateway, seconds: float) -> bool:
    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        if gateway.process.poll() is not None:
            return False  # the port was taken meanwhile, say
        with contextlib.suppress(httpx.HTTPError):
            response = httpx.get(f"{gateway.url}/api/kernelspecs", headers=gateway.headers,
                                 timeout=2)
            if response.status_code == 200:
                return True
        time.sleep(0.05)
    return False


GatewayRuntimeFactory = RuntimeFactory
"""``make_runtime`` here (tests/conftest.py's, on the gateway's ``runtime_defaults``)."""
