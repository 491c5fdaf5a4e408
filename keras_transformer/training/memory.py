"""How much memory a training step needs, against what this machine allows.

A batch budget (`--tokens-per-batch`) that the machine cannot hold used to
run until the backend failed to allocate a tensor, tens of seconds in, with a
traceback. `check_memory` estimates the activations a step keeps for its
backward pass from the model's sizes and the budget, compares them with the
memory this process may use (physical memory, a cgroup limit, an
address-space limit: the smallest), and refuses a budget that cannot fit
before anything is built, naming the largest one that can.

The estimate, per padded target token (source tokens are about as many), in
float32 values:

    (N_enc + 2 N_dec) (8 d_model + 3 d_ff + 3 h L) + 4 V

for each layer's projections, feed-forward, attention scores of rows of
length L = --max-length (the worst bucket: the budget holds fewest, longest
rows there), and the logits with their softmax and gradient over the
vocabulary V; a quarter more for the backward pass's temporaries (5 bytes a
value). Measured on the 2-core CPU (`tiny`, vocabulary 400, --max-length
128; peak RSS at 32,768 and 98,304 tokens, 2026-12-04): 59 KB a token on
TensorFlow and 77 KB on JAX, against the estimate's 92 KB, so the estimate
errs towards refusing. Only the CPU is checked: a GPU's memory is the
backend's to report.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from keras_transformer.config import TransformerConfig

# The framework, the model's weights and optimizer state, the data: what a
# process holds besides the activations (measured: 1.3 GB on TensorFlow).
BASELINE_BYTES = 2 * 2**30
BYTES_PER_VALUE = 5  # float32, and a quarter for the backward's temporaries.
GIB = 2**30


def activation_bytes_per_token(config: TransformerConfig, max_length: int) -> int:
    """The estimate of the module doc, in bytes, for one target token."""
    layers = config.num_encoder_layers + 2 * config.num_decoder_layers
    per_layer = 8 * config.d_model + 3 * config.d_ff + 3 * config.num_heads * max_length
    return BYTES_PER_VALUE * (layers * per_layer + 4 * config.vocab_size)


def memory_limit() -> tuple[int, str]:
    """The memory this process may use, in bytes, and what sets it."""
    limits = [(_physical_memory(), "the machine's physical memory")]
    cgroup = _cgroup_limit()
    if cgroup:
        limits.append((cgroup, "its cgroup's memory limit"))
    for name, kind in (("RLIMIT_AS", "address-space"), ("RLIMIT_DATA", "data")):
        soft, _ = resource.getrlimit(getattr(resource, name))
        if soft != resource.RLIM_INFINITY:
            limits.append((soft, f"its {kind} limit (ulimit)"))
    return min(limits)


def largest_budget(config: TransformerConfig, max_length: int, limit: int) -> int:
    """The largest --tokens-per-batch whose estimate fits in `limit` bytes."""
    spare = max(limit - BASELINE_BYTES, 0)
    return spare // activation_bytes_per_token(config, max_length)


def check_memory(
    config: TransformerConfig,
    tokens_per_batch: int,
    max_length: int,
    capacity: int | None = None,
) -> None:
    """Refuse a budget whose estimated step does not fit in this process's
    memory (see the module doc); `capacity`, the most the training set can
    fill, caps the budget it recommends."""
    limit, source = memory_limit()
    per_token = activation_bytes_per_token(config, max_length)
    needed = BASELINE_BYTES + tokens_per_batch * per_token
    if needed <= limit:
        return
    fits = largest_budget(config, max_length, limit)
    if capacity is not None:
        fits = min(fits, capacity)
    advice = (
        f"Use at most --tokens-per-batch {fits} (with --accumulation-steps K "
        "for K times the tokens per update), or a smaller --max-length"
        if fits >= max_length
        else "Lower --max-length or use a smaller --preset: not even one pair "
        "padded to --max-length fits"
    )
    raise ValueError(
        f"--tokens-per-batch {tokens_per_batch:,} would need about "
        f"{needed / GIB:.1f} GiB for a training step of this model (d_model "
        f"{config.d_model}, {config.num_encoder_layers}+{config.num_decoder_layers} "
        f"layers, vocabulary {config.vocab_size:,}, rows up to --max-length "
        f"{max_length}), but {source} allows {limit / GIB:.1f} GiB. {advice}."
    )


class TrainingOutOfMemory(RuntimeError):
    """The backend could not allocate a training step's tensors."""


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is a backend's (or Python's) failure to allocate:
    TensorFlow's ResourceExhaustedError, XLA's RESOURCE_EXHAUSTED, torch's
    OutOfMemoryError, MemoryError (told by name: no backend is imported)."""
    names = {kind.__name__ for kind in type(error).__mro__}
    if names & {"ResourceExhaustedError", "OutOfMemoryError", "MemoryError"}:
        return True
    text = str(error)
    return "RESOURCE_EXHAUSTED" in text or "OOM when allocating" in text


def out_of_memory(
    error: BaseException, step: int, tokens_per_batch: int, run_kept: bool
) -> TrainingOutOfMemory:
    """The sentence for a real out-of-memory, with the flag to lower."""
    detail = next((line for line in str(error).splitlines() if line.strip()), "")
    smaller = max(tokens_per_batch // 2, 1)
    outcome = (
        "the last checkpoint is kept; the budget is part of the run's settings, "
        "so train with the smaller one into a new --run-dir (or --overwrite)"
        if run_kept
        else "the run saved no checkpoint and was removed"
    )
    return TrainingOutOfMemory(
        f"out of memory in training step {step + 1} with --tokens-per-batch "
        f"{tokens_per_batch:,} ({type(error).__name__}: {detail[:200]}). Lower "
        f"--tokens-per-batch (to {smaller:,}, say; --accumulation-steps 2 keeps "
        f"the tokens per update) or --max-length; {outcome}."
    )


def _physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _cgroup_limit() -> int | None:
    for path in (
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < _physical_memory():
            return int(text)
    return None
