"""`serving.mappings` and the server's use of it: compiled programs stop
before the kernel's vm.max_map_count would crash the process (issue 50).

Plain Python around fake counts and a fake engine: run once (the torch
suite); the warm-up's progress and program counts too. The real
server's warm-up and soak: tests/serving/test_server_soak.py (JAX)."""

from __future__ import annotations

import pytest

from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving import app
from keras_transformer.serving.mappings import (
    mappings_exhausted,
    maps_running_short,
    memory_maps,
)
from keras_transformer.serving.observability import ServerMetrics
from keras_transformer.serving.options import ServeOptions
from keras_transformer.serving.schema import RequestError
from tests.serving.test_observability import samples

pytestmark = pytest.mark.backend_neutral


def test_this_process_has_mappings_under_the_limit():
    found = memory_maps()  # Linux: this process's own, and the limit.
    assert found is None or 0 < found[0] < found[1]


def test_a_warning_past_half_and_a_refusal_past_85_percent():
    assert maps_running_short(lambda: (21_821, 65_530)) is None
    assert maps_running_short(lambda: None) is None
    warning = maps_running_short(lambda: (40_000, 65_530))
    assert "40,000 memory mappings of the 65,530" in warning
    assert "--warmup-tokens" in warning and "vm.max_map_count" in warning
    assert mappings_exhausted(lambda: (55_000, 65_530)) is None
    assert mappings_exhausted(lambda: None) is None
    refusal = mappings_exhausted(lambda: (56_000, 65_530))
    assert "56,000 of the 65,530" in refusal and "over 85%" in refusal
    assert "--max-text-tokens" in refusal and "sysctl" in refusal


class _Engine:
    """Plans its warm-up as the Keras engine does, in steps of each part;
    each step "compiles" two programs and "loads" one from the cache."""

    def __init__(self, counts: list[int]):
        self.counts = counts  # (compiled, loaded) so far, as app._programs.

    def _steps(self, n: int) -> list:
        def step():
            self.counts[0] += 2
            self.counts[1] += 1

        return [step] * n

    def warm_up_steps(self, allowed, tokens):
        return self._steps(3)

    def attention_warm_up_steps(self, tokens):
        return self._steps(2)

    def details_warm_up_steps(self, tokens):
        return self._steps(1)


def _serving(monkeypatch, **fields) -> tuple[app.Serving, list[int]]:
    counts = [0, 0]
    monkeypatch.setattr(app, "_programs", lambda: tuple(counts))
    needed = dict(
        engine=_Engine(counts),
        batcher=None,
        options=ServeOptions(),
        settings=SearchSettings(),
        allowed=None,
        metrics=ServerMetrics(),
    )
    return app.Serving(**{**needed, **fields}), counts


def test_the_warm_up_stops_with_the_settings_to_lower(monkeypatch):
    monkeypatch.setattr(app, "mappings_exhausted", lambda: "MAPPINGS SHORT.")
    serving, _ = _serving(monkeypatch)
    with pytest.raises(RuntimeError, match="the warm-up stopped after 0 programs"):
        serving.warm_up()
    assert not serving.ready


def test_the_warm_up_says_how_far_it_is_and_what_it_compiled(monkeypatch, caplog):
    # Issue 50: no progress while warming; cache loads counted as compiles.
    serving, counts = _serving(monkeypatch)
    seen = []
    original = serving.metrics.warmup_step_done

    def step_done():
        original()
        found = samples(serving.metrics)
        seen.append(
            (
                found[("keras_transformer_warmup_shapes_done", ())],
                found[("keras_transformer_warmup_shapes_planned", ())],
                found[("keras_transformer_compilations_total", (("phase", "warmup"),))],
            )
        )

    serving.metrics.warmup_step_done = step_done
    with caplog.at_level("INFO", logger="keras_transformer.serve"):
        serving.warm_up()
    assert serving.ready
    # Planned up front; compilations counted as they happen, not at the end.
    assert [done for done, _, _ in seen] == [1, 2, 3, 4, 5, 6]
    assert {planned for _, planned, _ in seen} == {6}
    assert [compiled for _, _, compiled in seen] == [0, 2, 4, 6, 8, 10]
    found = samples(serving.metrics)
    loads = "keras_transformer_compilation_cache_loads_total"
    assert found[(loads, (("phase", "warmup"),))] == 6
    assert found[("keras_transformer_compilations_total", (("phase", "warmup"),))] == 12
    assert (
        "3 batch shapes, 2 attention shapes, 1 details shapes, 12 programs "
        "compiled, 6 loaded from the compilation cache; ready" in caplog.text
    )
    counts[0] += 1  # One compiled while serving: counted there.
    serving.count_compilations()
    assert serving.metrics.programs("serving") == (1, 0)


def test_near_the_limit_only_texts_that_would_compile_are_refused(monkeypatch):
    serving, _ = _serving(monkeypatch, warmup_tokens=32)
    serving.check_compiles([40, 5])  # Far from the limit: anything goes.
    serving.mappings_short = "this process holds 56,000 of the 65,530 ..."
    serving.check_compiles([32, 5])  # Warmed: compiles nothing.
    with pytest.raises(RequestError) as refused:
        serving.check_compiles([33])
    assert refused.value.status == 503
    assert "more than 32 tokens" in str(refused.value)
    assert "56,000 of the 65,530" in str(refused.value)
