"""``--batch`` for a stage of several LLM steps: each run submits the first step the cache cannot answer and stops;
each rerun after ``resume`` gets one step further, and a rerun with every answer cached makes no call."""

from __future__ import annotations

from collections.abc import Sequence

from ...llm.client import LLMClient
from ...llm.types import LLMRequest


class WaitingForBatch(Exception):
    """The stage stopped at ``step``: its requests went out as batch ``batch_id``."""

    def __init__(self, batch_id: str, step: str) -> None:
        super().__init__(f"waiting for batch {batch_id} ({step})")
        self.batch_id, self.step = batch_id, step


async def submit_or_go_on(client: LLMClient, batch: bool, requests: Sequence[LLMRequest], step: str) -> None:
    """With ``batch``, stop the stage (:class:`WaitingForBatch`) unless the cache answers every request."""
    if batch:
        batch_id = await client.submit_missing(requests)
        if batch_id is not None:
            raise WaitingForBatch(batch_id, step)
