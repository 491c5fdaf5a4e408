"""Encode blocks of sentence pairs into flat token arrays, here or in workers.

`encode_block` is the one place where training pairs are filtered and
encoded: the in-memory path (`pipeline.filter_pairs`) and the workers of
`keras-transformer prepare` both call it, so the two keep the same pairs.
A pair is dropped when either side is empty or whitespace-only, or when its
source, or its target plus the end token, is longer than `max_length`; the
line numbers of both kinds are returned. Evaluation sets are encoded with
`max_length=None`: nothing is dropped.

`EncoderPool` runs `encode_block` in worker processes for a SentencePiece
model file and returns the results in input order, with at most two blocks
per worker in flight, so memory is bounded by the blocks, not the corpus.
A worker runs this file as a script: only the standard library, NumPy and
sentencepiece are imported there, never the package (whose `__init__`
starts Keras and its backend: seconds and hundreds of MB per worker).
"""

from __future__ import annotations

import dataclasses
import itertools
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

__all__ = [
    "EncodedBlock",
    "EncoderPool",
    "drop_empty_pairs",
    "drop_long_pairs",
    "encode_block",
    "encode_corpus",
]

# A worker runs this file as __main__ without the current directory on
# sys.path (a module there could shadow one that NumPy imports).
_BOOTSTRAP = (
    "import runpy, sys; del sys.path[0]; "
    "runpy.run_path(sys.argv[1], run_name='__main__')"
)


def drop_empty_pairs(
    source: Sequence[str], target: Sequence[str], line_numbers: Sequence[int]
) -> tuple[list[int], list[int]]:
    """Indices of pairs with text on both sides, and line numbers of the rest."""
    keep, dropped = [], []
    for index, (src, tgt) in enumerate(zip(source, target)):
        if src.strip() and tgt.strip():
            keep.append(index)
        else:
            dropped.append(line_numbers[index])
    return keep, dropped


def drop_long_pairs(
    source_ids: Sequence[Sequence[int]],
    target_ids: Sequence[Sequence[int]],
    line_numbers: Sequence[int],
    max_length: int,
) -> tuple[list[int], list[int]]:
    """Keep pairs whose source and shifted target fit in `max_length` tokens."""
    fits = _fits(
        np.fromiter(map(len, source_ids), np.int64, count=len(source_ids)),
        np.fromiter(map(len, target_ids), np.int64, count=len(target_ids)),
        max_length,
    )
    dropped = np.asarray(line_numbers, np.int64)[~fits].tolist()
    return np.flatnonzero(fits).tolist(), dropped


def _fits(
    source_lengths: np.ndarray, target_lengths: np.ndarray, max_length: int
) -> np.ndarray:
    """The length filter: the source, and the target with its end token (the
    shifted target), each at most `max_length` tokens."""
    return (source_lengths <= max_length) & (target_lengths + 1 <= max_length)


@dataclasses.dataclass
class EncodedBlock:
    """The kept pairs of a block as flat arrays, in input order.

    `source_ids` holds every kept source's ids one after another (no
    BOS/EOS), `source_lengths` their lengths (int64); the same for the
    target. `empty_lines` and `too_long_lines` are the line numbers of the
    dropped pairs."""

    source_lengths: np.ndarray
    source_ids: np.ndarray
    target_lengths: np.ndarray
    target_ids: np.ndarray
    empty_lines: list[int]
    too_long_lines: list[int]

    def __len__(self) -> int:
        return len(self.source_lengths)

    @property
    def pairs_read(self) -> int:
        """Kept and dropped pairs."""
        return len(self) + len(self.empty_lines) + len(self.too_long_lines)


def _flat(ids: list[list[int]], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
    total = int(lengths.sum())
    values = np.fromiter(itertools.chain.from_iterable(ids), dtype, count=total)
    return lengths, values


def encode_block(
    encode: Callable[[list[str]], list[list[int]]],
    source: Sequence[str],
    target: Sequence[str],
    line_numbers: Sequence[int],
    *,
    max_length: int | None,
    dtype: str = "int32",
    encode_target: Callable[[list[str]], list[list[int]]] | None = None,
) -> EncodedBlock:
    """Encode a block of pairs, dropping empty and over-long ones (none when
    `max_length` is None). `encode` maps texts to ragged ids (the targets
    too, unless `encode_target` is given: a tokenizer with a model per
    side); `dtype` is the ids' array type (uint16 holds any id of a
    vocabulary up to 65,536)."""
    empty: list[int] = []
    # Most blocks have no empty side: one pass in C finds that.
    if max_length is not None and not (
        all(map(str.strip, source)) and all(map(str.strip, target))
    ):
        keep, empty = drop_empty_pairs(source, target, line_numbers)
        source = [source[i] for i in keep]
        target = [target[i] for i in keep]
        line_numbers = [line_numbers[i] for i in keep]
    source_lengths, source_ids = _flat(encode(list(source)), dtype)
    target_lengths, target_ids = _flat((encode_target or encode)(list(target)), dtype)
    too_long: list[int] = []
    if max_length is not None:
        fits = _fits(source_lengths, target_lengths, max_length)
        if not fits.all():
            too_long = np.asarray(line_numbers)[~fits].tolist()
            source_lengths, source_ids = _keep(source_lengths, source_ids, fits)
            target_lengths, target_ids = _keep(target_lengths, target_ids, fits)
    return EncodedBlock(
        source_lengths, source_ids, target_lengths, target_ids, empty, too_long
    )


def _keep(
    lengths: np.ndarray, ids: np.ndarray, keep: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The lengths and flat ids of the pairs where `keep` is true."""
    return lengths[keep], ids[np.repeat(keep, lengths)]


def encode_corpus(
    encode: Callable[[list[str]], list[list[int]]],
    corpus,
    *,
    max_length: int | None,
    dtype: str = "int32",
    encode_target: Callable[[list[str]], list[list[int]]] | None = None,
) -> EncodedBlock:
    """`encode_block` over a whole corpus held in memory (anything with
    `source`, `target` and `line_numbers`, such as a `ParallelCorpus`)."""
    return encode_block(
        encode,
        corpus.source,
        corpus.target,
        corpus.line_numbers,
        max_length=max_length,
        dtype=dtype,
        encode_target=encode_target,
    )


class WorkerError(RuntimeError):
    """A worker process failed; the message holds its traceback or output."""


class EncoderPool:
    """`workers` processes that encode blocks with a SentencePiece model.

    `map(blocks)` yields `encode_block`'s result for each
    (line_numbers, source, target) in input order. An exception raised by
    the input iterator (a bad line) is raised here, at its place in the
    order. Use as a context manager: leaving it stops the workers.
    """

    def __init__(
        self, model_file: str, workers: int, *, max_length: int, dtype: str
    ) -> None:
        arguments = [model_file, str(max_length), dtype]
        self._processes = [
            subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, __file__, *arguments],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for _ in range(workers)
        ]
        self._stop = threading.Event()

    def __enter__(self) -> EncoderPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        for process in self._processes:
            try:
                process.stdin.close()
            except OSError:  # A worker that died closed its end.
                pass
        for process in self._processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            for stream in (process.stdout, process.stderr):
                stream.close()

    def map(
        self, blocks: Iterable[tuple[Sequence[int], list[str], list[str]]]
    ) -> Iterator[EncodedBlock]:
        count = len(self._processes)
        in_flight = threading.Semaphore(2 * count)
        order: queue.Queue = queue.Queue()
        feeder = threading.Thread(
            target=self._feed, args=(blocks, in_flight, order), daemon=True
        )
        feeder.start()
        try:
            while True:
                worker = order.get()
                if isinstance(worker, BaseException):
                    raise worker
                if worker is None:
                    return
                yield self._result(self._processes[worker])
                in_flight.release()
        finally:
            self._stop.set()  # The feeder stops at its next block.

    def _feed(self, blocks, in_flight: threading.Semaphore, order: queue.Queue):
        """Send block i to worker i mod n, in order (run in a thread)."""
        try:
            for index, block in enumerate(blocks):
                while not in_flight.acquire(timeout=0.1):
                    if self._stop.is_set():
                        return
                worker = index % len(self._processes)
                stdin = self._processes[worker].stdin
                pickle.dump(block, stdin, protocol=pickle.HIGHEST_PROTOCOL)
                stdin.flush()
                order.put(worker)
            order.put(None)
        except BaseException as error:  # Handed to the reading thread.
            order.put(error)

    @staticmethod
    def _result(process: subprocess.Popen) -> EncodedBlock:
        try:
            kind, value = pickle.load(process.stdout)
        except EOFError:
            process.wait()
            output = process.stderr.read().decode("utf-8", "replace")
            raise WorkerError(
                f"an encoding worker (pid {process.pid}) exited with status "
                f"{process.returncode}: {output.strip()[-2000:] or 'no output'}"
            ) from None
        if kind == "error":
            raise WorkerError(f"an encoding worker failed:\n{value}")
        return EncodedBlock(**value)


def _worker_main(model_file: str, max_length: str, dtype: str) -> None:
    """Encode the blocks read from stdin until it closes (a worker)."""
    import traceback

    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=model_file)

    def encode(texts: list[str]) -> list[list[int]]:
        # One thread: the pool's processes already share out the cores.
        return processor.encode(texts, out_type=int, num_threads=1)

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            lines, source, target = pickle.load(stdin)
        except EOFError:
            return
        try:
            result = encode_block(
                encode, source, target, lines, max_length=int(max_length), dtype=dtype
            )
            # Fields, not the class: here it is __main__.EncodedBlock.
            message = ("ok", vars(result))
        except Exception:  # noqa: BLE001 - reported to the parent, which raises.
            message = ("error", traceback.format_exc())
        pickle.dump(message, stdout, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.flush()


if __name__ == "__main__":
    _worker_main(*sys.argv[2:5])
