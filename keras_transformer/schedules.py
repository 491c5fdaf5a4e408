"""Learning-rate schedules: the paper's (§5.3) and a fine-tuning one.

`TransformerSchedule` (Vaswani et al. 2017) trains from scratch;
`FineTuneSchedule` is what `train --init-from` uses."""

from __future__ import annotations

import keras
from keras import ops


def _is_count(value) -> bool:
    """An int, not a bool (True is an int to Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).

    Linear warmup for `warmup_steps`, then decay with the inverse square
    root of the step. The optimizer counts steps from 0, where the formula
    is 0 (and step^-0.5 is infinite); we evaluate it at step + 1, so the
    first update already moves the weights and every value is finite.
    The step is cast to float32 whatever its dtype (int64 on TF, int32 on
    JAX), and the piecewise minimum is an `ops.minimum`, so the schedule
    works under jit on every backend.

    Args:
        d_model: int. Model size.
        warmup_steps: int. Defaults to 4000.
        scale: float. Multiplier (tensor2tensor's `learning_rate`, OpenNMT's
            `scale`). Defaults to 1.0, the paper's value.

    Examples:
        >>> schedule = TransformerSchedule(d_model=512)
        >>> keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98,
        ...                       epsilon=1e-9)
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        for name, value in (("d_model", d_model), ("warmup_steps", warmup_steps)):
            if not _is_count(value) or value < 1:
                raise ValueError(
                    f"{name} must be an integer >= 1. Received: {name}={value!r}"
                )
        if not scale > 0:
            raise ValueError(f"scale must be > 0. Received: scale={scale!r}")
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = float(scale)

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        warmup = ops.cast(self.warmup_steps, "float32")
        rate = ops.minimum(ops.rsqrt(step), step * ops.power(warmup, -1.5))
        return self.scale * self.d_model**-0.5 * rate

    def peak(self) -> float:
        """The largest learning rate, reached at the end of warmup."""
        return self.scale * (self.d_model * self.warmup_steps) ** -0.5

    def get_config(self):
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
        }


@keras.saving.register_keras_serializable(package="keras_transformer")
class FineTuneSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to `peak`, then a linear decay, or a constant rate.

    With u = step + 1, the 1-based update (as `TransformerSchedule` reads
    the step): lrate = peak * u / warmup_steps while u < warmup_steps; then
    peak * (total_steps + 1 - u) / (total_steps + 1 - warmup_steps), which
    falls linearly to peak / (total_steps + 1 - warmup_steps) at the last
    update (never 0: the last update still moves the weights) and is held
    at 0 beyond it; without `total_steps`, peak from then on.

    The shape is the usual fine-tuning recipe (a short warmup, then linear
    decay: the LoRA paper, Hu et al. 2021, §E; Hugging Face's
    `get_linear_schedule_with_warmup`). The paper's schedule restarted at
    step 0 suits fine-tuning badly: at update 200 of a `base` model it is
    d_model^-0.5 * 200 * 4000^-1.5, about 3.5e-5, too small for LoRA's new
    factors to move.

    Args:
        peak: float > 0. The largest rate, reached at `warmup_steps`.
        warmup_steps: int >= 1. Updates of the linear warmup.
        total_steps: int >= warmup_steps, or None (constant after warmup).

    Examples:
        >>> schedule = FineTuneSchedule(1e-3, warmup_steps=20, total_steps=400)
    """

    def __init__(self, peak: float, warmup_steps: int, total_steps: int | None = None):
        if isinstance(peak, bool) or not isinstance(peak, (int, float)) or peak <= 0:
            raise ValueError(f"peak must be a number > 0. Received: peak={peak!r}")
        if not _is_count(warmup_steps) or warmup_steps < 1:
            raise ValueError(
                f"warmup_steps must be an integer >= 1. Received: {warmup_steps!r}"
            )
        if total_steps is not None and (
            not _is_count(total_steps) or total_steps < warmup_steps
        ):
            raise ValueError(
                "total_steps must be None or an integer >= warmup_steps "
                f"({warmup_steps}). Received: total_steps={total_steps!r}"
            )
        self.peak_rate = float(peak)
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step):
        update = ops.cast(step, "float32") + 1.0
        rate = ops.minimum(update / float(self.warmup_steps), 1.0)
        if self.total_steps is not None:
            remaining = float(self.total_steps + 1) - update
            span = float(self.total_steps + 1 - self.warmup_steps)
            rate = ops.minimum(rate, ops.maximum(remaining / span, 0.0))
        return self.peak_rate * rate

    def peak(self) -> float:
        """The largest learning rate, reached at the end of warmup."""
        return self.peak_rate

    def get_config(self):
        return {
            "peak": self.peak_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
        }


@keras.saving.register_keras_serializable(package="keras_transformer")
class PerUpdateSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Evaluate `schedule` at the number of optimizer updates.

    With gradient accumulation over k batches, Keras calls a learning-rate
    schedule with its batch counter, so a warmup of w steps would end after
    w / k updates. This wrapper passes `step // k` instead: at update u
    (1-based), applied on batch u * k (counter u * k - 1), the schedule sees
    u - 1, which `TransformerSchedule` reads as the paper's step_num u.

    Args:
        schedule: a `LearningRateSchedule` of the update number.
        accumulation_steps: int. Batches per update (k).
    """

    def __init__(self, schedule, accumulation_steps: int):
        if not _is_count(accumulation_steps) or accumulation_steps < 1:
            raise ValueError(
                "accumulation_steps must be an integer >= 1. "
                f"Received: accumulation_steps={accumulation_steps!r}"
            )
        if isinstance(schedule, dict):
            schedule = keras.saving.deserialize_keras_object(schedule)
        self.schedule = schedule
        self.accumulation_steps = accumulation_steps

    def __call__(self, step):
        return self.schedule(ops.floor_divide(step, self.accumulation_steps))

    def get_config(self):
        return {
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "accumulation_steps": self.accumulation_steps,
        }


def transformer_optimizer(
    schedule: keras.optimizers.schedules.LearningRateSchedule,
    *,
    gradient_accumulation_steps: int | None = None,
    clipnorm: float | None = None,
) -> keras.optimizers.Adam:
    """Adam(beta_1=0.9, beta_2=0.98, epsilon=1e-9), as §5.3.

    With `gradient_accumulation_steps` k > 1, one update is made of k
    batches: the schedule is wrapped in `PerUpdateSchedule` so it counts
    updates, and Keras's `optimizer.iterations` counts updates too (Adam's
    bias correction uses it). Keras averages the k gradients; the training
    pipeline's token weights make that average the per-token gradient of the
    whole update (see `LabelSmoothedCrossEntropy`).
    """
    accumulation = gradient_accumulation_steps or 1
    if accumulation > 1:
        schedule = PerUpdateSchedule(schedule, accumulation)
    return keras.optimizers.Adam(
        learning_rate=schedule,
        beta_1=0.9,
        beta_2=0.98,
        epsilon=1e-9,
        gradient_accumulation_steps=accumulation if accumulation > 1 else None,
        global_clipnorm=clipnorm,
    )
