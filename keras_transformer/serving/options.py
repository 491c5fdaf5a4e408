"""`ServeOptions`: the numeric flags of `keras-transformer serve`, checked once.

The flags are made from these fields (`max_wait_ms` is `--max-wait-ms`), as
`train`'s are from `TrainOptions`. Light to import: the command line reads
it before Keras starts.
"""

from __future__ import annotations

import dataclasses

from keras_transformer.utils.setting_fields import check_setting, setting


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """Dynamic batching and the limits of one request.

    The batching defaults were measured with `benchmarks/serving_load.py`
    on the `small` Multi30k model (docs/benchmarks.md, "HTTP serving").
    """

    # 0: serving.server.default_batch_size, measured per engine.
    max_batch_size: int = setting(
        0,
        "dynamic batching: texts decoded together, at most (0: 8 for --engine "
        "keras, 32 for the others)",
        minimum=0,
    )
    # 0: under load a batch forms while the last one decodes; a wait only
    # slows a lone client (docs/benchmarks.md, "on a quiet machine").
    max_wait_ms: float = setting(
        0.0,
        "dynamic batching: how long the oldest waiting text may wait for "
        "others to join its batch (0: decode what is waiting at once)",
        minimum=0.0,
    )
    # An accepted request waits about max_queue / throughput plus a batch: at
    # 2x the capacity of a 2-core machine (7-14 sentences/s), 256 gave a p99
    # of 6-14 s and 64 of 9-11 s in a slower hour (docs/benchmarks.md).
    max_queue: int = setting(
        64, "texts that may wait for a batch; past them, 503 + Retry-After", minimum=1
    )
    max_texts: int = setting(64, "texts per /v1/translate request", minimum=1)
    max_text_chars: int = setting(
        1000, "characters per text (longer: 413; nothing is truncated)", minimum=1
    )
    # Characters do not bound the work: byte fallback spells an emoji in 4
    # tokens, and the encoder's attention grows with the square of the count.
    max_text_tokens: int = setting(
        256, "subword tokens per text, after tokenizing (longer: 413)", minimum=1
    )
    max_beam_size: int = setting(8, "the widest beam a request may ask for", minimum=1)
    # Which engines decode side by side: serving.server.decode_workers.
    workers: int = setting(
        0,
        "batches decoded at once (0: 2 on 2 or more cores for --engine "
        "ctranslate2, and keras on jax or tensorflow; else 1)",
        minimum=0,
        maximum=64,  # A thread and, for CTranslate2, a model replica each.
    )
    threads: int = setting(
        0,
        "CTranslate2 engine: intra-op threads per batch decoding (0: the cores "
        "this process may use, less one for the HTTP side, shared by the workers)",
        minimum=0,
    )

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            check_setting(field, getattr(self, field.name))
        if self.max_texts > self.max_queue:
            raise ValueError(
                f"max_texts (--max-texts) is {self.max_texts}, more than "
                f"max_queue (--max-queue) {self.max_queue}: such a request could "
                "never be queued. Raise --max-queue or lower --max-texts."
            )

    @property
    def max_body_bytes(self) -> int:
        """The largest body a valid request can need: every text at the
        limit, each character escaped (`\\uXXXX`, 6 bytes; 12 for one outside
        the BMP, a surrogate pair), plus the rest."""
        return self.max_texts * (12 * self.max_text_chars + 8) + 4096
