"""Model adapters: OpenAI-compatible HTTP, and a scripted model for offline runs."""
