"""Token counting: the async variants count exactly as count()/count_many() do, and only
large texts leave the event loop (small ones are counted inline: the thread hop costs more)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable

import pytest

from app.errors import ServiceUnavailable
from app.tokens import THREAD_THRESHOLD_CHARS, Tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    t = Tokenizer.load("cl100k_base")
    assert t.ready, t.error
    return t


def text_of(chars: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    words = ["memory", "robot", "the", "agent", "context", "ünïcode", "数据", "42", "<|endoftext|>"]
    out = " ".join(rng.choice(words) for _ in range(chars))
    return out[:chars]


async def loop_turns_during(call: Awaitable[object]) -> tuple[object, int]:
    """What `call` returns, and how many times the event loop ran another task meanwhile."""
    turns = 0
    done = False

    async def ticker() -> None:
        nonlocal turns
        while not done:
            await asyncio.sleep(0)
            turns += not done

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker is running
    turns = 0
    result = await call
    done = True
    await task
    return result, turns


async def test_count_async_counts_exactly_as_count(tokenizer: Tokenizer) -> None:
    for chars in (0, 1, 100, THREAD_THRESHOLD_CHARS, THREAD_THRESHOLD_CHARS + 1, 256 * 1024):
        text = text_of(chars, seed=chars)
        assert await tokenizer.count_async(text) == tokenizer.count(text)
    assert await tokenizer.count_async("hello world") == 2
    assert await tokenizer.count_async("<|endoftext|>") == 7  # special tokens count as text


async def test_count_many_async_counts_exactly_as_count_many(tokenizer: Tokenizer) -> None:
    small = [text_of(50, seed=i) for i in range(5)]
    large = [text_of(2000, seed=i) for i in range(40)]  # 32+ texts: encode_batch inside
    for texts in ([], small, large, [*small, text_of(THREAD_THRESHOLD_CHARS, 9)]):
        expected = [tokenizer.count(t) for t in texts]
        assert await tokenizer.count_many_async(texts) == expected
        assert tokenizer.count_many(texts) == expected


async def test_large_texts_are_counted_off_the_event_loop(tokenizer: Tokenizer) -> None:
    small = text_of(THREAD_THRESHOLD_CHARS)
    large = text_of(256 * 1024)
    # Inline: the coroutine never yields, so no other task runs while it counts.
    assert await loop_turns_during(tokenizer.count_async(small)) == (tokenizer.count(small), 0)
    assert (await loop_turns_during(tokenizer.count_many_async([small])))[1] == 0
    # In a worker thread: the loop keeps running other tasks meanwhile.
    count, turns = await loop_turns_during(tokenizer.count_async(large))
    assert count == tokenizer.count(large) and turns >= 1
    counts, turns = await loop_turns_during(tokenizer.count_many_async([small, small]))
    assert counts == [tokenizer.count(small)] * 2 and turns >= 1


async def test_async_variants_report_an_unloaded_tokenizer_as_503() -> None:
    broken = Tokenizer.load("no_such_encoding")
    for call in (broken.count_async("x" * 10_000), broken.count_many_async(["x"] * 40)):
        with pytest.raises(ServiceUnavailable) as err:
            await call
        assert err.value.extra == {"dependency": "tokenizer"}


def test_a_lazy_tokenizer_reads_its_file_on_first_use_and_counts_the_same() -> None:
    """The commands' tokenizer (`htm keys`, `htm stats` count nothing): no file read at start."""
    lazy = Tokenizer.load("cl100k_base", lazy=True)
    assert lazy._encoding is None
    eager = Tokenizer.load("cl100k_base")
    texts = ["Hello, world.", "walrus tusks\n\nand more", ""]
    assert lazy.count_joined(texts, [eager.count(t) for t in texts]) == eager.count(
        "\n\n".join(texts)
    )
    assert lazy._encoding is not None and lazy.ready
    broken = Tokenizer.load("no-such-encoding", lazy=True)
    assert broken.error is None
    assert not broken.ready
    assert broken.error is not None and "'no-such-encoding' could not be loaded" in broken.error
