"""MCP content blocks as registry content (pure, over the SDK's models): what the text
says, which blocks survive as images, and that a post-execute hook's content wins."""

from __future__ import annotations

import base64
from typing import Any

import pytest

pytest.importorskip("mcp.client")  # "mcp" alone could resolve to the tests/unit/mcp folder

from mcp import types
from mcp_support import call

from dsh_jupyter import ToolRegistry, define_tool
from dsh_jupyter.mcp.content import RichContent, mcp_content
from dsh_jupyter.registry.definition import ToolDefinition, ToolOutput, default_render
from dsh_jupyter.registry.policy import Accept
from dsh_jupyter.registry.results import text_content

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(32)).decode()


def test_an_image_that_is_not_what_it_claims_stays_a_placeholder() -> None:
    content = mcp_content([types.ImageContent(type="image", data="bm90IGEgcG5n",
                                              mime_type="image/png"),
                           types.AudioContent(type="audio", data="AAAA", mime_type="audio/wav")])
    assert content.text == ("[image image/png: not attached, its data is not that type of image]\n"
                            "[audio audio/wav: not attached]")
    assert [block["type"] for block in content.blocks] == ["text", "text"]
    assert not content.rich


def test_plain_text_is_not_rich_and_renders_as_before() -> None:
    content = mcp_content([types.TextContent(type="text", text="a"),
                           types.TextContent(type="text", text="b")])
    assert content.text == "a\nb" and not content.rich


def test_a_link_keeps_title_size_and_annotations() -> None:
    link = types.ResourceLink(type="resource_link", uri="file:///r.csv", name="r", title="Runs",
                              size=2048, annotations=types.Annotations(audience=["user"]))
    content = mcp_content([link])
    assert content.text == ('[resource link file:///r.csv | name "r" | title "Runs" | '
                            'size 2 KB | audience ["user"]]')
    assert content.blocks[0].get("annotations") == {"audience": ["user"]} and content.rich


def _tool(rich: RichContent, blocks: list[Any]) -> ToolDefinition:
    async def execute(args: Any, ctx: Any) -> str:
        content = mcp_content(blocks)
        rich.keep(ctx.token, content)
        return content.text

    return define_tool(name="pic", parameters={"type": "object", "properties": {}},
                       output=ToolOutput(schema={"type": "string"}, render=default_render),
                       execute=execute, finalize_content=rich.finalize)


async def test_the_blocks_replace_the_rendered_text() -> None:
    registry, rich = ToolRegistry(), RichContent()
    registry.register(_tool(rich, [types.ImageContent(type="image", data=PNG,
                                                      mime_type="image/png")]))
    result = await call(registry, "pic")
    assert result.content == ({"type": "image", "data": PNG, "mime_type": "image/png"},)
    assert result.value == "[image image/png, 40 B]"
    assert not rich._kept  # nothing outlives the call


async def test_content_a_post_execute_hook_set_wins() -> None:
    registry, rich = ToolRegistry(), RichContent()
    registry.register(_tool(rich, [types.ImageContent(type="image", data=PNG,
                                                      mime_type="image/png")]))
    registry.on_post_execute(lambda execution, result: Accept(content="(redacted)"))
    result = await call(registry, "pic")
    assert result.content == text_content("(redacted)")
    assert not rich._kept
