"""A registry the CLI tests load with --tools cli_fixtures.sample_tools:registry."""

from dsh_jupyter import ToolRegistry

registry = ToolRegistry()


@registry.tool
async def greet(name: str) -> str:
    """Greet someone."""
    return f"hello, {name}"
