"""A paid job in miniature, for the kill test: N chat requests through the LLM layer, answers written to OUT.

python tests/llm_job.py WORKSPACE BASE_URL OUT N
"""

import asyncio
import json
import sys

from testset_builder.llm import LLMClient, LLMRequest, Message, OpenAIProvider, RetryPolicy
from testset_builder.store import open_workspace


async def main(workspace_dir: str, base_url: str, out: str, n: int) -> None:
    with open_workspace(workspace_dir) as workspace:
        client = LLMClient(
            OpenAIProvider(api_key="sk-job", base_url=base_url),
            workspace,
            "job",
            max_in_flight=4,
            retry=RetryPolicy(initial_wait=0.01, max_wait=0.05),
        )
        requests = [
            LLMRequest(model="gpt-4o-mini", messages=(Message(role="user", content=f"question {i}"),)) for i in range(n)
        ]
        async with client:
            answers = await client.complete_many(requests)
        with open(out, "w") as handle:
            json.dump([a.text for a in answers], handle)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
