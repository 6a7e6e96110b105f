"""Model adapters: OpenAI-compatible and Anthropic on their official clients, and a
scripted model for offline runs."""
