"""Dynamic batching: texts of concurrent requests decoded as one batch.

Each request's texts join one FIFO queue. A worker thread takes the oldest
text and the texts after it that were asked for with the same search
settings, up to `max_batch_size`, waiting for more at most `max_wait_ms`
after the oldest arrived (a full batch goes at once), decodes them with one
engine call, and hands each text's result back to its request. With
`workers` > 1 (an engine that decodes batches side by side: CTranslate2
with `inter_threads`, the Keras engine on JAX or TensorFlow), that many
batches decode at once: the next one forms while the others run. A
request's texts may then be in two batches decoding at once. A request
is answered when all its texts are done, in its own order, whatever
batches they went through. Texts asked for with other settings keep their
place for a later batch: one search runs one set of settings.

The queue is bounded (`max_queue` texts waiting): a request that would
overflow it is refused at once with `Overloaded` (the server's 503 and
Retry-After) instead of growing memory and latency without end. A failing
batch fails only the requests with texts in it. A request whose caller
left (`abandon`) has its waiting texts dropped from the queue: nobody
would read their translations.

`BatchQueue` is the deterministic part (what goes into the next batch, and
when), driven by explicit times; `Batcher` runs it on worker threads.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any


class Overloaded(RuntimeError):
    """The queue is full; `retry_after` is a guess of when it has room (s)."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class _Request:
    """One caller's texts and the future its answer goes to."""

    def __init__(self, size: int, single: bool = False):
        self.future: Future = Future()
        self.results: list[Any] = [None] * size
        self.remaining = size
        self.single = single  # The answer is the one result, not a list.
        # Two workers may fill texts of one request at once: a lost
        # decrement would leave its caller waiting forever.
        self._lock = threading.Lock()

    def fill(self, index: int, result: Any) -> None:
        if self.future.done():  # Failed in another batch already.
            return
        with self._lock:
            self.results[index] = result
            self.remaining -= 1
            complete = self.remaining == 0
        if complete:
            answer = self.results[0] if self.single else self.results
            # The caller may cancel between done() and here (a forced exit):
            # that must not stop the worker, whose batch has other callers.
            with contextlib.suppress(InvalidStateError):
                self.future.set_result(answer)

    def fail(self, error: BaseException) -> None:
        with contextlib.suppress(InvalidStateError):
            self.future.set_exception(error)


@dataclasses.dataclass
class Item:
    """One text of one request (or, with `call`, a job run alone)."""

    key: Hashable
    text: Any
    request: _Request
    index: int
    arrival: float
    call: Callable[[], Any] | None = None


class BatchQueue:
    """Which items form the next batch, and when (no threads, no clock).

    Args:
        max_batch_size: texts per batch, at most.
        max_wait: seconds the oldest text may wait for others to join.
        max_queue: texts that may wait, at most.
    """

    def __init__(self, max_batch_size: int, max_wait: float, max_queue: int):
        for name, value in (
            ("max_batch_size", max_batch_size),
            ("max_queue", max_queue),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1. Received: {value!r}")
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait
        self.max_queue = max_queue
        self.items: collections.deque[Item] = collections.deque()

    def __len__(self) -> int:
        return len(self.items)

    def room(self) -> int:
        return self.max_queue - len(self.items)

    def add(self, items: Sequence[Item]) -> None:
        if len(items) > self.room():
            raise ValueError(f"{len(items)} items do not fit in {self.room()}.")
        self.items.extend(items)

    def next_batch(self, now: float) -> tuple[list[Item], float | None]:
        """(the batch to run now, []) or ([], seconds to wait before asking
        again; None: nothing queued). The batch leaves the queue."""
        if not self.items:
            return [], None
        first = self.items[0]
        if first.call is not None:
            return [self.items.popleft()], 0.0
        same = [item for item in self.items if item.key == first.key]
        due = first.arrival + self.max_wait
        # A full queue cannot grow a batch: waiting would only refuse others.
        full = len(self.items) >= self.max_queue
        if len(same) < self.max_batch_size and now < due and not full:
            return [], due - now
        batch = same[: self.max_batch_size]
        chosen = {id(item) for item in batch}
        self.items = collections.deque(i for i in self.items if id(i) not in chosen)
        return batch, 0.0


class Batcher:
    """Runs a `BatchQueue` on `workers` worker threads.

    Args:
        run_batch: `(texts, key) -> results`, one result per text in order;
            called on the worker threads only: with one worker an engine
            needs no locks, with more it must decode batches side by side.
        max_batch_size, max_wait_ms, max_queue: see `BatchQueue`.
        workers: batches decoding at once, at most. A `submit_call` job
            still runs alone: it waits for the batches running, and the
            queue behind it waits for it.
        clock: seconds, monotonic (tests pass their own).
        on_batch: called with each decoded batch's size (metrics).
        cancellable: `run_batch` takes `abandoned=`, a callable giving a
            bool per text of the batch, True once its caller has left.
    """

    def __init__(
        self,
        run_batch: Callable[[list[Any], Hashable], Sequence[Any]],
        *,
        max_batch_size: int,
        max_wait_ms: float,
        max_queue: int,
        workers: int = 1,
        clock: Callable[[], float] = time.monotonic,
        on_batch: Callable[[int], None] | None = None,
        cancellable: bool = False,
    ):
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an int >= 1. Received: {workers!r}")
        self._run_batch = run_batch
        self._queue = BatchQueue(max_batch_size, max_wait_ms / 1000, max_queue)
        self._clock = clock
        self._changed = threading.Condition()
        self._stopping = False
        self._busy = 0  # Texts being decoded now.
        self._running = 0  # Batches and calls being run now.
        self._alone = False  # A call runs: nothing else may start.
        self._batches = self._texts = 0  # Decoded so far (mean batch size).
        self._seconds_per_text = 0.05  # Refined by every batch (Retry-After).
        self._dropped = 0  # Texts of abandoned requests taken off the queue.
        self._on_batch = on_batch
        self._cancellable = cancellable
        self._threads = [
            threading.Thread(
                target=self._work, name=f"keras-transformer-batcher-{n}", daemon=True
            )
            for n in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def max_batch_size(self) -> int:
        """Texts per batch, at most."""
        return self._queue.max_batch_size

    @property
    def workers(self) -> int:
        """Batches that may decode at once."""
        return len(self._threads)

    def submit(self, texts: Sequence[Any], key: Hashable) -> Future:
        """Queue `texts` to decode with settings `key`; a Future of their
        results in order. Raises `Overloaded` when they do not fit."""
        request = _Request(len(texts))
        if not texts:
            request.future.set_result([])
            return request.future
        with self._changed:
            now = self._clock()
            items = [Item(key, t, request, i, now) for i, t in enumerate(texts)]
            self._enqueue(items)
        return request.future

    def submit_call(self, call: Callable[[], Any]) -> Future:
        """Run `call()` alone on a worker thread, in queue order (work
        that must not run beside the decoding, such as attention weights);
        a Future of its result."""
        request = _Request(1, single=True)
        with self._changed:
            self._enqueue([Item(None, None, request, 0, self._clock(), call)])
        return request.future

    def abandon(self, future: Future) -> int:
        """The caller of `future` left: drop its texts still waiting (those
        decoding finish, unread) and cancel it. Returns the texts dropped."""
        with self._changed:
            kept = [i for i in self._queue.items if i.request.future is not future]
            dropped = len(self._queue) - len(kept)
            self._queue.items = collections.deque(kept)
            self._dropped += dropped
            self._changed.notify_all()
        future.cancel()
        return dropped

    def _enqueue(self, items: list[Item]) -> None:
        if self._stopping:
            raise Overloaded("The server is shutting down.", retry_after=1)
        if len(items) > self._queue.room():
            waiting = len(self._queue) + self._busy
            retry = math.ceil(waiting * self._seconds_per_text / self.workers)
            raise Overloaded(
                f"The queue is full ({len(self._queue)} of {self._queue.max_queue} "
                f"texts waiting; this request has {len(items)}): try again later.",
                retry_after=max(1, retry),
            )
        self._queue.add(items)
        self._changed.notify()

    def stats(self) -> dict[str, int]:
        """Texts queued and decoding now; batches and texts decoded so far."""
        with self._changed:
            return {
                "queued": len(self._queue),
                "decoding": self._busy,
                "batches": self._batches,
                "texts": self._texts,
                "dropped": self._dropped,
            }

    def stop(self, timeout: float | None = None) -> None:
        """Finish what is queued, then end the workers. New work is refused."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(left)

    def _work(self) -> None:
        while True:
            with self._changed:
                batch = self._wait_for_batch()
                if batch is None:
                    return
                self._busy += len(batch)
                self._running += 1
                self._alone = batch[0].call is not None
                # Another worker may form the next batch meanwhile.
                self._changed.notify_all()
            try:
                outcome = self._decode(batch)
            finally:
                # Counted as done before any caller has its answer, so that
                # a caller asking /healthz next sees its texts decoded.
                with self._changed:
                    self._busy -= len(batch)
                    self._running -= 1
                    if batch[0].call is None:
                        self._batches += 1
                        self._texts += len(batch)
                        if self._on_batch is not None:
                            self._on_batch(len(batch))
                    else:
                        self._alone = False
                    self._changed.notify_all()
            self._deliver(batch, outcome)

    def _wait_for_batch(self) -> list[Item] | None:
        """The next batch (None: stopping and nothing left); holds the lock."""
        while True:
            if not self._may_start():
                self._changed.wait()
                continue
            # Stopping, nothing more will join: what waits runs at once.
            now = math.inf if self._stopping else self._clock()
            batch, wait = self._queue.next_batch(now)
            if batch:
                return batch
            if wait is None and self._stopping:
                return None
            self._changed.wait(wait)

    def _may_start(self) -> bool:
        """Whether this worker may take the head of the queue now: not
        while a call runs alone, nor a call while batches run."""
        if self._alone:
            return False
        head = self._queue.items[0] if self._queue.items else None
        return not (head is not None and head.call is not None and self._running)

    def _decode(self, batch: list[Item]) -> list[Any] | Exception:
        """The batch's results in order, or the error that fails it (only
        this batch's requests)."""
        start = time.perf_counter()
        try:
            if batch[0].call is not None:
                return [batch[0].call()]
            texts, key = [i.text for i in batch], batch[0].key
            if self._cancellable:
                gone = _abandoned(batch)
                results = list(self._run_batch(texts, key, abandoned=gone))
            else:
                results = list(self._run_batch(texts, key))
        except Exception as error:
            return error
        if len(results) != len(batch):
            return RuntimeError(
                f"The engine returned {len(results)} results for {len(batch)} texts."
            )
        seconds = (time.perf_counter() - start) / len(batch)
        self._seconds_per_text = 0.8 * self._seconds_per_text + 0.2 * seconds
        return results

    @staticmethod
    def _deliver(batch: list[Item], outcome: list[Any] | Exception) -> None:
        if isinstance(outcome, Exception):
            for item in batch:
                item.request.fail(outcome)
            return
        for item, result in zip(batch, outcome):
            item.request.fill(item.index, result)


def _abandoned(batch: list[Item]) -> Callable[[], list[bool]]:
    """Whether the caller of each text of `batch` has left, when asked."""
    futures = [item.request.future for item in batch]
    return lambda: [future.cancelled() for future in futures]
