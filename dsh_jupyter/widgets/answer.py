"""The model's text of one step as it streams in: a card a live view shows for a model
that streams (``agent/text-delta`` events), completed by the assistant message."""

from __future__ import annotations

from .cards import Card
from .doc import Doc, Text


class AnswerCard(Card):
    """The text the model wrote in one step of a run. ``streaming`` until the step's
    assistant message arrives; its text then replaces the pieces."""

    kind = "answer"

    def __init__(self, *, step: int) -> None:
        super().__init__()
        self.step = step
        self.pieces: list[str] = []
        self.streaming = True

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def add(self, piece: str) -> None:
        self.pieces.append(piece)
        self._changed()

    def finish(self, text: str | None) -> None:
        """The step's message came: its whole text (``None``: keep what streamed)."""
        if text is not None:
            self.pieces = [text]
        self.streaming = False
        self._changed()

    def _document(self) -> Doc:
        return Doc(title=f"model, step {self.step}", kind=self.kind,
                   status="running" if self.streaming else "ok",
                   blocks=(Text(text=self.text),) if self.pieces else ())
