"""Dynamic batching without sockets: `BatchQueue` on explicit times, and
`Batcher`'s worker thread over a fake engine."""

from __future__ import annotations

import random
import threading
import time

import pytest

from keras_transformer.serving.batcher import Batcher, BatchQueue, Item, Overloaded

pytestmark = pytest.mark.backend_neutral


def items(key, texts, arrival, request=None):
    return [Item(key, t, request, i, arrival) for i, t in enumerate(texts)]


def test_a_lone_text_waits_max_wait_then_goes():
    queue = BatchQueue(max_batch_size=4, max_wait=0.010, max_queue=16)
    queue.add(items("a", ["x"], arrival=1.0))
    batch, wait = queue.next_batch(now=1.004)
    assert batch == [] and wait == pytest.approx(0.006)
    batch, _ = queue.next_batch(now=1.010)
    assert [i.text for i in batch] == ["x"]
    assert queue.next_batch(now=2.0) == ([], None)


def test_a_full_batch_goes_at_once_and_the_rest_waits_its_turn():
    queue = BatchQueue(max_batch_size=3, max_wait=1.0, max_queue=16)
    queue.add(items("a", ["1", "2", "3", "4"], arrival=0.0))
    batch, _ = queue.next_batch(now=0.0)
    assert [i.text for i in batch] == ["1", "2", "3"]
    assert queue.next_batch(now=0.5)[0] == []  # "4" waits for company.
    assert [i.text for i in queue.next_batch(now=1.0)[0]] == ["4"]


def test_other_settings_keep_their_place_for_a_later_batch():
    queue = BatchQueue(max_batch_size=8, max_wait=0.0, max_queue=16)
    queue.add(items("beam4", ["a1"], 0.0) + items("beam1", ["b1", "b2"], 0.0))
    queue.add(items("beam4", ["a2"], 0.1))
    first, _ = queue.next_batch(now=0.2)
    second, _ = queue.next_batch(now=0.2)
    assert [(i.key, i.text) for i in first] == [("beam4", "a1"), ("beam4", "a2")]
    assert [(i.key, i.text) for i in second] == [("beam1", "b1"), ("beam1", "b2")]


def test_a_call_runs_alone_in_its_turn():
    queue = BatchQueue(max_batch_size=8, max_wait=5.0, max_queue=16)
    queue.add([Item(None, None, None, 0, 0.0, call=lambda: 1)])
    queue.add(items("a", ["x"], 0.0))
    batch, _ = queue.next_batch(now=0.0)
    assert len(batch) == 1 and batch[0].call is not None


def test_a_full_queue_goes_at_once_though_the_batch_could_hold_more():
    queue = BatchQueue(max_batch_size=8, max_wait=5.0, max_queue=3)
    queue.add(items("a", ["1", "2"], arrival=0.0))
    assert queue.next_batch(now=0.0)[0] == []  # Room left: it waits.
    queue.add(items("a", ["3"], arrival=0.0))
    batch, _ = queue.next_batch(now=0.0)  # Full: waiting only refuses others.
    assert [i.text for i in batch] == ["1", "2", "3"]


@pytest.mark.parametrize("field", ["max_batch_size", "max_queue"])
def test_the_queue_refuses_sizes_below_one(field):
    sizes = {"max_batch_size": 4, "max_queue": 4, field: 0}
    with pytest.raises(ValueError, match=f"{field} must be an int >= 1. Received: 0"):
        BatchQueue(max_wait=0.0, **sizes)


def test_the_queue_refuses_what_does_not_fit():
    queue = BatchQueue(max_batch_size=2, max_wait=0.0, max_queue=3)
    queue.add(items("a", ["1", "2"], 0.0))
    with pytest.raises(ValueError, match="2 items do not fit in 1"):
        queue.add(items("a", ["3", "4"], 0.0))
    assert len(queue) == 2


class EchoEngine:
    """Translates text t with settings k as f"{k}:{t}"; records batches."""

    def __init__(self, gate: threading.Event | None = None, fail_on=None):
        self.batches = []
        self.gate = gate
        self.fail_on = fail_on

    def __call__(self, texts, key):
        if self.gate is not None:
            self.gate.wait(10)
        self.batches.append((key, list(texts)))
        if self.fail_on in texts:
            raise RuntimeError(f"cannot translate {self.fail_on}")
        return [f"{key}:{t}" for t in texts]


@pytest.mark.parametrize("workers", [1, 3])
def test_concurrent_callers_get_their_own_answers_in_their_order(workers):
    engine = EchoEngine()
    batcher = Batcher(
        engine, max_batch_size=5, max_wait_ms=2, max_queue=1000, workers=workers
    )
    answers = {}

    def caller(number):
        rng = random.Random(number)
        futures = []
        for request in range(10):
            key = rng.choice(["beam1", "beam4"])
            texts = [f"{number}.{request}.{i}" for i in range(rng.randint(1, 7))]
            futures.append((key, texts, batcher.submit(texts, key)))
        answers[number] = [(k, t, f.result(10)) for k, t, f in futures]

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    batcher.stop()
    for number in range(8):
        for key, texts, result in answers[number]:
            assert result == [f"{key}:{t}" for t in texts]
    assert all(len(texts) <= 5 for _, texts in engine.batches)
    assert all(len({t for t in texts}) == len(texts) for _, texts in engine.batches)
    # Requests were merged: fewer batches than requests.
    assert len(engine.batches) < 80
    stats = batcher.stats()
    assert stats["batches"] == len(engine.batches)
    assert stats["texts"] == sum(len(texts) for _, texts in engine.batches)


def test_a_failing_batch_fails_only_its_requests():
    engine = EchoEngine(fail_on="bad")
    batcher = Batcher(engine, max_batch_size=1, max_wait_ms=0, max_queue=10)
    bad = batcher.submit(["bad"], "k")
    good = batcher.submit(["good"], "k")
    with pytest.raises(RuntimeError, match="cannot translate bad"):
        bad.result(10)
    assert good.result(10) == ["k:good"]
    batcher.stop()


def test_a_full_queue_refuses_with_a_retry_after_and_keeps_what_it_has():
    gate = threading.Event()
    batcher = Batcher(EchoEngine(gate), max_batch_size=2, max_wait_ms=0, max_queue=4)
    first = batcher.submit(["a", "b"], "k")  # Taken by the worker, held.
    deadline = time.monotonic() + 10
    while batcher.stats()["decoding"] == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    queued = batcher.submit(["c", "d", "e", "f"], "k")
    with pytest.raises(Overloaded) as refused:
        batcher.submit(["g"], "k")
    assert refused.value.retry_after >= 1
    assert "4 of 4 texts waiting" in str(refused.value)
    gate.set()
    assert first.result(10) == ["k:a", "k:b"]
    assert queued.result(10) == ["k:c", "k:d", "k:e", "k:f"]
    batcher.stop()


def test_stop_finishes_what_is_queued_then_refuses():
    gate = threading.Event()
    batcher = Batcher(EchoEngine(gate), max_batch_size=1, max_wait_ms=0, max_queue=9)
    futures = [batcher.submit([str(i)], "k") for i in range(3)]
    stopper = threading.Thread(target=batcher.stop)
    stopper.start()
    gate.set()
    stopper.join(10)
    assert [f.result(0) for f in futures] == [["k:0"], ["k:1"], ["k:2"]]
    with pytest.raises(Overloaded, match="shutting down"):
        batcher.submit(["late"], "k")


def test_submit_call_answers_with_the_calls_result():
    batcher = Batcher(EchoEngine(), max_batch_size=4, max_wait_ms=0, max_queue=4)
    assert batcher.submit_call(lambda: {"weights": 1}).result(10) == {"weights": 1}
    batcher.stop()


def test_a_caller_cancelled_meanwhile_does_not_stop_the_worker():
    from keras_transformer.serving.batcher import _Request

    gone = _Request(2)
    gone.future.cancel()
    gone.future.done = lambda: False  # Cancelled between the check and the set.
    gone.fill(0, "a")
    gone.fill(1, "b")  # Would raise InvalidStateError in the worker thread.
    gone.fail(RuntimeError("batch failed"))
    assert gone.future.cancelled()


class OverlapEngine:
    """Holds each batch until released; records how many ran at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.release = threading.Event()
        self.events = []

    def __call__(self, texts, key):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.events.append(("start", tuple(texts)))
        self.release.wait(10)
        with self.lock:
            self.running -= 1
            self.events.append(("end", tuple(texts)))
        return [f"{key}:{t}" for t in texts]


def wait_until(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_two_workers_decode_two_batches_at_once():
    engine = OverlapEngine()
    batcher = Batcher(engine, max_batch_size=2, max_wait_ms=0, max_queue=8, workers=2)
    first = batcher.submit(["a", "b"], "k")
    second = batcher.submit(["c", "d"], "k")
    third = batcher.submit(["e"], "k")
    wait_until(lambda: engine.running == 2)
    assert batcher.stats()["decoding"] == 4 and batcher.stats()["queued"] == 1
    engine.release.set()
    assert [f.result(10) for f in (first, second, third)] == [
        ["k:a", "k:b"],
        ["k:c", "k:d"],
        ["k:e"],
    ]
    batcher.stop()
    assert engine.most == 2


def test_one_worker_decodes_one_batch_at_a_time():
    engine = OverlapEngine()
    engine.release.set()
    batcher = Batcher(engine, max_batch_size=1, max_wait_ms=0, max_queue=8)
    futures = [batcher.submit([str(i)], "k") for i in range(6)]
    assert [f.result(10) for f in futures] == [[f"k:{i}"] for i in range(6)]
    batcher.stop()
    assert engine.most == 1


def test_a_call_waits_for_running_batches_and_runs_alone():
    engine = OverlapEngine()
    batcher = Batcher(engine, max_batch_size=1, max_wait_ms=0, max_queue=8, workers=3)
    before = batcher.submit(["a"], "k")
    wait_until(lambda: engine.running == 1)
    call_ran, call_release = [], threading.Event()

    def call():
        with engine.lock:
            call_ran.append(engine.running)
        call_release.wait(10)
        return "called"

    called = batcher.submit_call(call)
    after = batcher.submit(["b"], "k")
    time.sleep(0.05)  # Two workers are free: neither may start the call or "b".
    assert call_ran == [] and engine.events == [("start", ("a",))]
    engine.release.set()
    wait_until(lambda: call_ran == [0])  # "a" ended before the call began.
    time.sleep(0.05)  # The call runs: no worker may start "b" beside it.
    assert engine.events == [("start", ("a",)), ("end", ("a",))]
    call_release.set()
    assert called.result(10) == "called"
    assert before.result(10) == ["k:a"] and after.result(10) == ["k:b"]
    batcher.stop()
    assert engine.events == [
        ("start", ("a",)),
        ("end", ("a",)),
        ("start", ("b",)),
        ("end", ("b",)),
    ]


def test_stop_with_several_workers_finishes_what_is_queued():
    engine = OverlapEngine()
    batcher = Batcher(engine, max_batch_size=1, max_wait_ms=0, max_queue=9, workers=2)
    futures = [batcher.submit([str(i)], "k") for i in range(5)]
    stopper = threading.Thread(target=batcher.stop)
    stopper.start()
    engine.release.set()
    stopper.join(10)
    assert not stopper.is_alive()
    assert [f.result(0) for f in futures] == [[f"k:{i}"] for i in range(5)]


def test_workers_must_be_a_positive_int():
    with pytest.raises(ValueError, match="workers must be an int >= 1. Received: 0"):
        Batcher(EchoEngine(), max_batch_size=1, max_wait_ms=0, max_queue=1, workers=0)


def test_two_workers_filling_one_request_at_once_lose_no_text():
    from keras_transformer.serving.batcher import _Request

    class SlowCount(_Request):
        """Reading the count yields to other threads: without a lock both
        fills read 2 and write 1, and the caller would wait forever."""

        @property
        def remaining(self):
            value = self._count
            time.sleep(0.05)
            return value

        @remaining.setter
        def remaining(self, value):
            self._count = value

    request = SlowCount(2)
    fills = [threading.Thread(target=request.fill, args=(i, str(i))) for i in (0, 1)]
    for thread in fills:
        thread.start()
    for thread in fills:
        thread.join(10)
    assert request.future.result(2) == ["0", "1"]


def test_a_caller_with_its_answer_sees_its_texts_counted_as_decoded():
    """/healthz right after an answer: nothing of it still "decoding"."""
    gate = threading.Event()
    batcher = Batcher(EchoEngine(gate), max_batch_size=4, max_wait_ms=0, max_queue=8)
    seen = []
    future = batcher.submit(["a", "b"], "k")
    # Called on the worker thread as the answer is set (the engine waits).
    future.add_done_callback(lambda _: seen.append(batcher.stats()))
    gate.set()
    assert future.result(10) == ["k:a", "k:b"]
    wait_until(lambda: seen)
    assert seen[0]["decoding"] == 0 and seen[0]["texts"] == 2
    batcher.stop()


def test_an_abandoned_request_leaves_the_queue_and_the_others_are_answered():
    gate = threading.Event()
    engine = EchoEngine(gate)
    sizes = []
    batcher = Batcher(
        engine, max_batch_size=2, max_wait_ms=0, max_queue=8, on_batch=sizes.append
    )
    first = batcher.submit(["a", "b"], "k")  # Taken by the worker, held.
    deadline = time.monotonic() + 10
    while batcher.stats()["decoding"] == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    gone = batcher.submit(["c", "d", "e"], "k")
    kept = batcher.submit(["f"], "k")
    assert batcher.abandon(gone) == 3
    assert gone.cancelled() and batcher.stats()["dropped"] == 3
    assert batcher.abandon(first) == 0  # Decoding: finished, unread.
    gate.set()
    assert kept.result(10) == ["k:f"]
    batcher.stop()
    assert engine.batches == [("k", ["a", "b"]), ("k", ["f"])]
    assert sizes == [2, 1]


def test_a_cancellable_engine_sees_which_texts_of_its_batch_were_abandoned():
    gate, seen = threading.Event(), []

    def run_batch(texts, key, abandoned):
        gate.wait(10)
        seen.append(abandoned())
        return list(texts)

    batcher = Batcher(
        run_batch, max_batch_size=4, max_wait_ms=50, max_queue=8, cancellable=True
    )
    gone = batcher.submit(["a", "b"], "k")
    kept = batcher.submit(["c"], "k")
    deadline = time.monotonic() + 10
    while batcher.stats()["decoding"] < 3 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert batcher.abandon(gone) == 0  # All three decoding already.
    gate.set()
    assert kept.result(10) == ["c"]
    batcher.stop()
    assert seen == [[True, True, False]]
