"""`serving.mappings` and the server's use of it: compiled programs stop
before the kernel's vm.max_map_count would crash the process (issue 50).

Plain Python around fake counts: run once (the torch suite). The real
server's warm-up and soak: tests/serving/test_server_soak.py (JAX)."""

from __future__ import annotations

import pytest

from keras_transformer.serving import app
from keras_transformer.serving.mappings import (
    mappings_exhausted,
    maps_running_short,
    memory_maps,
)
from keras_transformer.serving.schema import RequestError

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
    """Warms up as the Keras engine does: asks `stop` before each shape."""

    def warm_up(self, allowed, tokens, stop):
        for _ in range(3):
            if stop():
                return 0
        return 3


def _serving(**fields) -> app.Serving:
    needed = dict.fromkeys(
        ("engine", "batcher", "options", "settings", "allowed", "metrics")
    )
    return app.Serving(**{**needed, **fields})


def test_the_warm_up_stops_with_the_settings_to_lower(monkeypatch):
    monkeypatch.setattr(app, "mappings_exhausted", lambda: "MAPPINGS SHORT.")
    serving = _serving(engine=_Engine())
    with pytest.raises(RuntimeError, match="the warm-up stopped after 0 programs"):
        serving.warm_up()
    assert not serving.ready


def test_near_the_limit_only_texts_that_would_compile_are_refused():
    serving = _serving(warmup_tokens=32)
    serving.check_compiles([40, 5])  # Far from the limit: anything goes.
    serving.mappings_short = "this process holds 56,000 of the 65,530 ..."
    serving.check_compiles([32, 5])  # Warmed: compiles nothing.
    with pytest.raises(RequestError) as refused:
        serving.check_compiles([33])
    assert refused.value.status == 503
    assert "more than 32 tokens" in str(refused.value)
    assert "56,000 of the 65,530" in str(refused.value)
