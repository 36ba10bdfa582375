from __future__ import annotations

import asyncio
import math
import threading

import pytest

from app.embeddings import Embedder, EmbeddingError, MicroBatcher, OpenAIEmbedder
from tests.embeddings.fakes import CountingFake, ShortFake, vector_for
from tests.stubs import Recorded, StubServer


@pytest.mark.parametrize("max_batch", [1, 7, 16, 50, 64])
async def test_50_concurrent_embeds_make_ceil_50_over_max_batch_provider_calls(max_batch: int):
    fake = CountingFake()
    batcher = MicroBatcher(fake, max_batch=max_batch, max_wait_ms=20)
    texts = [f"t{i}" for i in range(50)]

    results = await asyncio.gather(*(batcher.embed([t]) for t in texts))

    assert results == [[vector_for(t)] for t in texts]
    assert len(fake.calls) == math.ceil(50 / max_batch)
    assert [t for call in fake.calls for t in call] == texts
    assert all(len(call) <= max_batch for call in fake.calls)
    await batcher.aclose()


async def test_callers_with_several_texts_get_their_own_vectors_in_order():
    fake = CountingFake()
    batcher = MicroBatcher(fake, max_batch=8, max_wait_ms=20)
    # Sizes chosen so callers straddle batch boundaries and one (20) spans three batches.
    sizes = [3, 5, 1, 20, 2, 4]
    start = [sum(sizes[:i]) for i in range(len(sizes))]
    requests = [[f"t{s + j}" for j in range(n)] for s, n in zip(start, sizes, strict=True)]

    results = await asyncio.gather(*(batcher.embed(r) for r in requests))

    assert results == [[vector_for(t) for t in r] for r in requests]
    assert [len(c) for c in fake.calls] == [8, 8, 8, 8, 3]
    await batcher.aclose()


async def test_provider_error_fails_every_caller_of_the_batch_and_the_next_batch_works():
    fake = CountingFake()
    batcher = MicroBatcher(fake, max_batch=10, max_wait_ms=10)
    fake.fail_next = EmbeddingError("ollama returned HTTP 500: boom")

    failed = await asyncio.gather(
        *(batcher.embed([f"t{i}"]) for i in range(10)), return_exceptions=True
    )

    assert len(fake.calls) == 1
    assert all(isinstance(r, EmbeddingError) for r in failed)
    assert {str(r) for r in failed} == {"ollama returned HTTP 500: boom"}
    assert len({id(r) for r in failed}) == 10  # each caller raises its own exception object

    ok = await asyncio.gather(*(batcher.embed([f"t{i}"]) for i in range(10, 15)))

    assert ok == [[vector_for(f"t{i}")] for i in range(10, 15)]
    assert fake.calls[1] == [f"t{i}" for i in range(10, 15)]
    await batcher.aclose()


async def test_error_fails_only_the_batch_it_happened_in():
    fake = CountingFake()
    batcher = MicroBatcher(fake, max_batch=5, max_wait_ms=10)
    fake.fail_next = EmbeddingError("timed out")

    results = await asyncio.gather(
        *(batcher.embed([f"t{i}"]) for i in range(10)), return_exceptions=True
    )

    assert [isinstance(r, EmbeddingError) for r in results] == [True] * 5 + [False] * 5
    assert results[5:] == [[vector_for(f"t{i}")] for i in range(5, 10)]


async def test_unexpected_provider_exception_reaches_callers_as_embedding_error():
    fake = CountingFake()
    batcher = MicroBatcher(fake, max_batch=4, max_wait_ms=5)
    fake.fail_next = RuntimeError("CUDA out of memory")

    results = await asyncio.gather(
        *(batcher.embed(["t1"]) for _ in range(2)), return_exceptions=True
    )

    assert [type(r) for r in results] == [EmbeddingError, EmbeddingError]
    assert str(results[0]) == "CUDA out of memory"
    assert isinstance(results[0].__cause__, RuntimeError)
    await batcher.aclose()


async def test_provider_returning_too_few_vectors_is_an_embedding_error():
    batcher = MicroBatcher(ShortFake(), max_batch=4, max_wait_ms=5)

    with pytest.raises(EmbeddingError, match="returned 2 vectors for 3 texts"):
        await batcher.embed(["t1", "t2", "t3"])


async def test_a_caller_arriving_behind_a_running_batch_waits_max_wait_for_company():
    fake = CountingFake(delay_s=0.01)
    batcher = MicroBatcher(fake, max_batch=100, max_wait_ms=300)

    first = asyncio.create_task(batcher.embed(["t0"]))
    await asyncio.sleep(0)  # t0 is at the provider: the batcher is busy
    second = asyncio.create_task(batcher.embed(["t1"]))
    await asyncio.sleep(0.05)  # t0's batch is done; t1 waits for company
    third = asyncio.create_task(batcher.embed(["t2"]))

    assert await first == [vector_for("t0")]
    assert await second == [vector_for("t1")]
    assert await third == [vector_for("t2")]
    assert fake.calls == [["t0"], ["t1", "t2"]]


def _unit(text: str) -> list[float]:
    """vector_for(text) as OpenAIEmbedder returns it (unit length)."""
    v = vector_for(text)
    n = math.hypot(*v)
    return [x / n for x in v]


def _openai_echo(request: Recorded) -> tuple[int, object]:
    """An OpenAI-compatible answer: vector_for(text) for each input, in order."""
    data = [
        {"object": "embedding", "index": i, "embedding": vector_for(t)}
        for i, t in enumerate(request.body["input"])
    ]
    return 200, {"object": "list", "data": data, "model": "m", "usage": {}}


async def test_a_lone_text_at_an_idle_batcher_is_sent_at_once_whatever_max_wait(
    stub: StubServer,
):
    stub.reply = _openai_echo
    provider = OpenAIEmbedder("m", 2, base_url=stub.url, timeout_s=5)
    batcher = MicroBatcher(provider, max_batch=64, max_wait_ms=600_000)

    # The wait is ten minutes: a lone question that waited for company would time out here.
    async with asyncio.timeout(5):
        first = await batcher.embed(["t1"])
        second = await batcher.embed(["t2"])  # idle again once the first is answered

    assert (first, second) == ([_unit("t1")], [_unit("t2")])
    assert [r.body["input"] for r in stub.requests] == [["t1"], ["t2"]]
    await batcher.aclose()


async def test_texts_arriving_while_the_provider_holds_a_batch_are_batched_behind_it(
    stub: StubServer,
):
    at_provider, release = threading.Event(), threading.Event()

    def held_first(request: Recorded) -> tuple[int, object]:
        if len(stub.requests) == 1:  # the server thread holds the first batch until told
            at_provider.set()
            release.wait(10)
        return _openai_echo(request)

    stub.reply = held_first
    provider = OpenAIEmbedder("m", 2, base_url=stub.url, timeout_s=15)
    batcher = MicroBatcher(provider, max_batch=3, max_wait_ms=0)

    first = asyncio.create_task(batcher.embed(["t0"]))
    assert await asyncio.to_thread(at_provider.wait, 10)
    rest = [asyncio.create_task(batcher.embed([f"t{i}"])) for i in range(1, 6)]
    await asyncio.sleep(0.05)  # all five queued behind t0; none may reach the provider yet
    assert [r.body["input"] for r in stub.requests] == [["t0"]]
    release.set()

    async with asyncio.timeout(10):
        assert await first == [_unit("t0")]
        assert await asyncio.gather(*rest) == [[_unit(f"t{i}")] for i in range(1, 6)]
    assert [r.body["input"] for r in stub.requests] == [
        ["t0"],
        ["t1", "t2", "t3"],  # max_batch
        ["t4", "t5"],
    ]
    await batcher.aclose()


async def test_a_full_batch_is_sent_without_waiting_for_max_wait():
    fake = CountingFake()
    batcher = MicroBatcher(fake, max_batch=4, max_wait_ms=60_000)

    async with asyncio.timeout(2):
        results = await asyncio.gather(*(batcher.embed([f"t{i}"]) for i in range(4)))

    assert results == [[vector_for(f"t{i}")] for i in range(4)]
    assert fake.calls == [["t0", "t1", "t2", "t3"]]


async def test_texts_queued_while_the_provider_is_busy_form_the_next_batch():
    fake = CountingFake(delay_s=0.1)
    batcher = MicroBatcher(fake, max_batch=50, max_wait_ms=0)

    first = asyncio.create_task(batcher.embed(["t0"]))
    await asyncio.sleep(0.02)  # t0's batch is now at the provider
    rest = await asyncio.gather(*(batcher.embed([f"t{i}"]) for i in range(1, 11)))

    assert await first == [vector_for("t0")]
    assert rest == [[vector_for(f"t{i}")] for i in range(1, 11)]
    assert fake.calls == [["t0"], [f"t{i}" for i in range(1, 11)]]


async def test_a_cancelled_caller_does_not_disturb_the_others_and_is_not_sent():
    fake = CountingFake()
    batcher = MicroBatcher(fake, max_batch=10, max_wait_ms=50)

    doomed = asyncio.create_task(batcher.embed(["t1"]))
    kept = asyncio.create_task(batcher.embed(["t2"]))
    await asyncio.sleep(0)
    doomed.cancel()

    assert await kept == [vector_for("t2")]
    assert doomed.cancelled()
    assert fake.calls == [["t2"]]


async def test_aclose_sends_what_is_queued_then_closes_the_provider():
    fake = CountingFake()
    batcher = MicroBatcher(fake, max_batch=10, max_wait_ms=60_000)
    tasks = [asyncio.create_task(batcher.embed([f"t{i}"])) for i in range(3)]
    await asyncio.sleep(0)

    async with asyncio.timeout(2):
        await batcher.aclose()

    assert [t.result() for t in tasks] == [[vector_for(f"t{i}")] for i in range(3)]
    assert fake.calls == [["t0", "t1", "t2"]]
    assert fake.closed
    with pytest.raises(EmbeddingError, match="closed"):
        await batcher.embed(["t9"])
    await batcher.aclose()  # idempotent


async def test_empty_input_needs_no_provider_call():
    fake = CountingFake()
    batcher = MicroBatcher(fake, max_batch=10, max_wait_ms=5)

    assert await batcher.embed([]) == []
    assert fake.calls == []


async def test_batcher_is_an_embedder_describing_its_provider():
    batcher = MicroBatcher(CountingFake(), max_batch=10, max_wait_ms=5)

    assert isinstance(batcher, Embedder)
    assert (batcher.provider, batcher.model, batcher.dimension) == ("fake", "fake-model", 2)
