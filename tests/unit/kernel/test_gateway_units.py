"""Gateway configuration and websocket framing, one rule each (no gateway needed)."""

from __future__ import annotations

import json

import pytest

from dsh_jupyter.kernel import KernelRuntimeConfig
from dsh_jupyter.kernel.gateway_config import GatewayConfig
from dsh_jupyter.kernel.launch.gateway import describe_refusal
from dsh_jupyter.kernel.transport.gateway_connection import (
    decode_legacy,
    decode_v1,
    encode_legacy,
    encode_v1,
)
from dsh_jupyter.kernel.transport.wire import WireCodec

GATEWAY = GatewayConfig(url="https://gw.example:8888/base/", token="sekrit")


def test_config_normalises_and_hides_secrets() -> None:
    assert GATEWAY.url == "https://gw.example:8888/base"
    assert GATEWAY.websocket_url == "wss://gw.example:8888/base"
    assert GatewayConfig(url="http://h:1").websocket_url == "ws://h:1"
    assert GATEWAY.auth_headers == {"Authorization": "token sekrit"}
    hidden = GatewayConfig(url="http://h", token="sekrit", headers={"X-Proxy": "cookie"})
    assert "sekrit" not in repr(hidden) and "cookie" not in repr(hidden)


@pytest.mark.parametrize("options", [
    {"url": "ftp://h"}, {"url": "h:8888"}, {"url": "http://h/?token=x"},
    {"url": "http://user:secret@h"},
    {"url": "http://h", "token": ""}, {"url": "http://h", "token": "a\nb"},
    {"url": "http://h", "headers": {"X": "a\nb"}}, {"url": "http://h", "headers": {"X\r": "a"}},
    {"url": "http://h", "ping_seconds": 0},
    {"url": "http://h", "verify": 1},
])
def test_config_rejects(options: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        GatewayConfig(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(("option", "value"), [
    ("carrier", "socket"), ("launcher", "fork"), ("launcher", "stock"),
    ("provisioner", "local-provisioner"), ("provisioner_config", {"x": 1}),
    ("memory_bytes", 2**30), ("open_files", 64),
])
def test_local_only_options_conflict_with_a_gateway(option: str, value: object) -> None:
    with pytest.raises(ValueError, match=option):
        KernelRuntimeConfig(gateway=GATEWAY, **{option: value})  # type: ignore[arg-type]


def test_tls_follows_verify() -> None:
    import ssl

    assert GATEWAY.ssl_context().verify_mode == ssl.CERT_REQUIRED
    relaxed = GatewayConfig(url="https://h", verify=False).ssl_context()
    assert (relaxed.verify_mode, relaxed.check_hostname) == (ssl.CERT_NONE, False)


def test_a_gateway_is_never_forked() -> None:
    config = KernelRuntimeConfig(gateway=GATEWAY)
    assert config.uses_fork is False
    with pytest.raises(ValueError, match="GatewayConfig"):
        KernelRuntimeConfig(gateway="http://h")  # type: ignore[arg-type]


def _parts(msg_type: str = "comm_msg") -> tuple[str, list[bytes]]:
    msg_id, frames = WireCodec(b"").encode(msg_type, {"comm_id": "c", "data": {"kind": "x"}})
    return msg_id, frames[2:]


def test_v1_round_trip() -> None:
    _, parts = _parts()
    frame = encode_v1("shell", [*parts, b"buffer"])
    assert decode_v1(frame) == ("shell", [*parts, b"buffer"])


@pytest.mark.parametrize("frame", [
    b"", b"\x05\x00\x00\x00\x00\x00\x00\x00",  # too short for its offsets
    (3).to_bytes(8, "little") + (0).to_bytes(8, "little") * 3,  # offsets before the data
    (2**40).to_bytes(8, "little"),  # absurd count
])
def test_v1_malformed_frames_decode_to_none(frame: bytes) -> None:
    assert decode_v1(frame) is None


def test_v1_offsets_past_the_end_are_rejected() -> None:
    _, parts = _parts()
    frame = encode_v1("iopub", parts)
    assert decode_v1(frame) is not None
    assert decode_v1(frame[:-3]) is None  # the last part ends past the frame


def test_legacy_round_trip() -> None:
    msg_id, parts = _parts()
    text = encode_legacy("shell", parts)
    message = json.loads(text)
    assert message["channel"] == "shell" and message["header"]["msg_id"] == msg_id
    assert message["content"] == {"comm_id": "c", "data": {"kind": "x"}}
    reply = json.dumps({"channel": "iopub", "header": {"msg_type": "stream"},
                        "parent_header": {"msg_id": msg_id}, "content": {"text": "hi"}})
    channel, incoming = decode_legacy(reply)
    assert channel == "iopub" and incoming is not None
    assert (incoming.msg_type, incoming.parent_id, incoming.content) == (
        "stream", msg_id, {"text": "hi"})


@pytest.mark.parametrize("text", [
    "not json", "[]", '{"channel": "iopub"}', '{"channel": 1, "header": {"msg_type": "a"}, '
    '"content": {}}', '{"channel": "iopub", "header": {}, "content": {}}',
    "[" * 100_000 + "]" * 100_000,
])
def test_legacy_junk_decodes_to_none(text: str) -> None:
    assert decode_legacy(text) == ("", None)


def test_refusals_name_the_cause() -> None:
    body = json.dumps({"reason": "Internal Server Error", "message": "Unknown server error",
                       "traceback": "Traceback ...\nNoSuchKernel: No such kernel named x\n"})
    assert describe_refusal("http://g", "start a kernel", 500, "Internal Server Error", body) \
        == ("the gateway at http://g refused to start a kernel (HTTP 500 Internal Server "
            "Error): NoSuchKernel: No such kernel named x")
    assert "max_kernels" in describe_refusal("http://g", "start a kernel", 403, "Forbidden",
                                             json.dumps({"reason": "Resource Limit"}))
    assert "GatewayConfig.token" in describe_refusal("http://g", "x", 401, "Unauthorized", "")


def test_enterprise_gateways_refusal_is_said_once() -> None:
    # Enterprise Gateway sends its message as the HTTP reason phrase and as the body's
    # "reason" (its "message" is empty).
    said = ("User 'root' is not authorized to start kernel 'Python 3'. Ensure KERNEL_USERNAME "
            "is set to an appropriate value and retry the request.")
    refusal = describe_refusal("http://g", "start a kernel", 403, said,
                               json.dumps({"reason": said, "message": ""}))
    assert refusal.count("is not authorized") == 1, refusal
    assert refusal == (f"the gateway at http://g refused to start a kernel (HTTP 403 "
                       f"Forbidden): {said} (a wrong token, or a limit such as max_kernels)")
