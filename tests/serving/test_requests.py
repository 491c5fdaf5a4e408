"""Every bad request's answer, without a server: the body's bytes, the
fields' types, the limits, the search settings; and the serve command's own
refusals (before anything loads)."""

from __future__ import annotations

import pytest

from keras_transformer.cli import main
from keras_transformer.decoding.sampling import SamplingSettings
from keras_transformer.decoding.settings import SearchSettings
from keras_transformer.serving import jobs, schema
from keras_transformer.serving.options import (
    AllowedSettings,
    ServeOptions,
    parse_sampling_list,
)
from keras_transformer.serving.schema import RequestError, TranslateRequest
from keras_transformer.serving.server import check_host

pytestmark = pytest.mark.backend_neutral

LIMITS = ServeOptions(max_texts=4, max_text_chars=20, max_queue=8)
ALLOWED = AllowedSettings((1, 2, 3, 4, 6), (0.0, 0.6))


def refused(function, *args, **kwargs):
    with pytest.raises(RequestError) as caught:
        function(*args, **kwargs)
    return caught.value.status, caught.value.field, caught.value.message


def job(**body):
    request = schema.validate(TranslateRequest, body)
    return jobs.translate_job(request, SearchSettings(), LIMITS, ALLOWED)


def test_invalid_utf8_names_the_byte_and_its_offset():
    status, field, message = refused(schema.parse_body, b'{"texts": ["a\xff"]}')
    assert (status, field) == (400, "body")
    assert "not valid UTF-8: byte b'\\xff' at offset 13" in message


@pytest.mark.parametrize(
    "body, expected",
    [
        (b'{"texts": ["a"]', "Expecting ',' delimiter at line 1 column 16"),
        (b"", "Expecting value at line 1 column 1"),
        (b'{"texts": ["a"], "alpha": NaN}', "NaN is not a number"),
        (b"[" * 100_000, "cannot be read as JSON here: maximum recursion"),
        (b'{"alpha": ' + b"9" * 5000 + b"}", "cannot be read as JSON here"),
    ],
)
def test_invalid_json_says_where(body, expected):
    status, field, message = refused(schema.parse_body, body)
    assert (status, field) == (400, "body")
    assert expected in message


@pytest.mark.parametrize(
    "body, field, expected",
    [
        ([1], "body", "must be a JSON object"),
        ({}, "texts", "texts is required"),
        ({"texts": "a dog"}, "texts", 'valid list. Received: "a dog"'),
        ({"texts": ["a", 5]}, "texts[1]", "valid string. Received: 5"),
        ({"texts": ["a"], "beam_size": "4"}, "beam_size", "valid integer"),
        ({"texts": ["a"], "beam_size": 4.0}, "beam_size", "valid integer"),
        ({"texts": ["a"], "beam_size": True}, "beam_size", "valid integer"),
        ({"texts": ["a"], "alpha": "0.6"}, "alpha", "valid number"),
        ({"texts": ["a"], "beam": 2}, "beam", "Fields: texts, beam_size, n_best"),
    ],
)
def test_wrong_types_and_fields_are_named(body, field, expected):
    status, named, message = refused(schema.validate, TranslateRequest, body)
    assert (status, named) == (422, field)
    assert expected in message


def test_an_empty_batch_is_refused():
    assert refused(job, texts=[])[:2] == (422, "texts")


def test_too_many_texts_is_413_with_the_limit():
    status, field, message = refused(job, texts=["a"] * 5)
    assert (status, field) == (413, "texts")
    assert "holds 5 texts; the limit is 4 per request (--max-texts)" in message


def test_a_text_too_long_is_413_with_the_limit_and_nothing_truncated():
    status, field, message = refused(job, texts=["ok", "x" * 21], split_sentences=False)
    assert (status, field) == (413, "texts[1]")
    assert "has 21 characters; the limit is 20 (--max-text-chars)" in message
    assert "leave split_sentences out" in message  # The way to send more.
    assert job(texts=["x" * 20], split_sentences=False).texts == ["x" * 20]
    # Without the flag a text may be a document, split into sentences
    # (each checked against --max-text-chars then): up to its own limit.
    limit = LIMITS.max_document_chars
    assert job(texts=["x" * limit]).texts == ["x" * limit]
    status, _, message = refused(job, texts=["x" * (limit + 1)])
    assert status == 413 and "(--max-document-chars)" in message


@pytest.mark.parametrize(
    "text, expected",
    [("a\ud800b", "lone surrogate U+D800 at character 1"), ("a\0", "NUL character")],
)
def test_text_no_tokenizer_can_take_is_refused(text, expected):
    status, field, message = refused(job, texts=[text])
    assert (status, field) == (422, "texts[0]")
    assert expected in message


@pytest.mark.parametrize(
    "options, field, expected",
    [
        ({"beam_size": 0}, "beam_size", "one of 1, 2, 3, 4, 6 (this server's --allo"),
        ({"beam_size": 7}, "beam_size", "Received: 7"),
        ({"alpha": -0.5}, "alpha", "alpha must be one of 0.0, 0.6 (this server's"),
        ({"alpha": 0.61}, "alpha", "--allowed-alphas: each is compiled before"),
        ({"alpha": float("inf")}, "alpha", "Received: inf"),
        ({"n_best": 5}, "n_best", "between 1 and the beam size (4). Received: 5"),
        ({"beam_size": 2, "n_best": 0}, "n_best", "beam size (2). Received: 0"),
    ],
)
def test_search_options_are_range_checked(options, field, expected):
    status, named, message = refused(job, texts=["a"], **options)
    assert (status, named) == (422, field)
    assert expected in message
    assert "--alpha" not in message  # A request has fields, not flags.


SAMPLING = ALLOWED.replace(sampling=parse_sampling_list("top-k:10,top-p:0.9:0.7"))


def sampling_job(**body):
    request = schema.validate(TranslateRequest, {"texts": ["a", "b"], **body})
    return jobs.translate_job(request, SearchSettings(), LIMITS, SAMPLING)


def test_sampling_is_one_of_the_allowed_with_the_requests_seed_and_samples():
    made = sampling_job(sampling="top-k", seed=7, num_samples=2)
    assert made.settings == SearchSettings(beam_size=1)  # Sampling draws greedily.
    assert made.sampling == SamplingSettings("top-k", top_k=10, seed=7, num_samples=2)
    assert sampling_job(sampling="top-k", top_k=10).sampling.top_k == 10
    nucleus = sampling_job(sampling="top-p", top_p=0.9, temperature=0.7).sampling
    assert (nucleus.p, nucleus.temperature, nucleus.seed) == (0.9, 0.7, None)
    assert sampling_job(sampling="greedy").sampling is None  # The search.
    assert sampling_job().sampling is None
    assert SAMPLING.to_dict()["sampling"] == ["top-k:10", "top-p:0.9:0.7"]


@pytest.mark.parametrize(
    "body, status, field, expected",
    [
        ({"sampling": "top-k", "top_k": 5}, 422, "sampling",
         "draws with top-k:10, top-p:0.9:0.7 (--allowed-sampling"),
        ({"sampling": "top-p"}, 422, "sampling", "this request asks for top-p:0.9."),
        ({"sampling": "beam"}, 422, "sampling", "must be one of greedy, top-k"),
        ({"sampling": "top-k", "top_k": 0}, 422, "top_k", "top_k must be >= 1"),
        ({"sampling": "top-p", "top_p": 0}, 422, "top_p", "top_p must be > 0.0"),
        ({"sampling": "top-k", "top_p": 0.5}, 422, "top_p",
         "top_p applies to sampling top-p"),
        ({"sampling": "top-k", "temperature": 0}, 422, "temperature",
         "at 0 every draw would be the most probable token"),
        ({"seed": 3}, 422, "seed", "seed applies to sampling only"),
        ({"sampling": "top-k", "beam_size": 4}, 422, "beam_size", "beam 1"),
        ({"sampling": "top-k", "n_best": 1}, 422, "n_best", "see samples"),
        ({"sampling": "top-k", "num_samples": 3}, 413, "num_samples",
         "2 texts times num_samples 3 are 6 translations; the limit is 4"),
        ({"sampling": "top-k", "seed": -1}, 422, "seed", "seed must be >= 0"),
    ],
)  # fmt: skip
def test_bad_sampling_requests_name_their_field(body, status, field, expected):
    got, named, message = refused(sampling_job, **body)
    assert (got, named) == (status, field), message
    assert expected in message
    assert "--top" not in message and "--seed" not in message  # Fields, not flags.


GUIDED = ALLOWED.replace(constraints=True)


def guided_job(allowed=GUIDED, **body):
    request = schema.validate(TranslateRequest, {"texts": ["a", "b"], **body})
    return jobs.translate_job(request, SearchSettings(), LIMITS, allowed)


def test_constraints_and_prefixes_come_per_text_stripped():
    made = guided_job(constraints=[[" Hund "], []], target_prefix=["Ein", ""])
    assert made.constraints == [["Hund"], []] and made.prefixes == ["Ein", ""]
    assert made.guided and made.n_best == 1
    assert guided_job(target_prefix=["x", "y"]).constraints is None
    assert not guided_job().guided


@pytest.mark.parametrize(
    "body, status, field, expected",
    [
        ({"constraints": [["a"]]}, 422, "constraints",
         "constraints has 1 entries for 2 texts"),
        ({"target_prefix": ["a", "b", "c"]}, 422, "target_prefix", "3 entries"),
        ({"constraints": [["a"], [" "]]}, 422, "constraints[1][0]", "is blank"),
        ({"constraints": [["a"], ["b" * 21]]}, 413, "constraints[1][0]",
         "the limit is 20"),
        ({"target_prefix": ["a", "b" * 21]}, 413, "target_prefix[1]", "limit"),
        ({"constraints": [[], []], "split_sentences": True}, 422,
         "split_sentences", "Send each sentence as a text"),
        ({"constraints": [[], []], "beam_size": 4, "n_best": 2}, 422, "n_best",
         "best hypothesis only"),
        ({"constraints": [[], []], "sampling": "top-k"}, 422, "sampling",
         "not sampling"),
        ({"constraints": "a"}, 422, "constraints", "valid list"),
    ],
)  # fmt: skip
def test_bad_constraints_are_named(body, status, field, expected):
    allowed = GUIDED.replace(sampling=SAMPLING.sampling)
    got, named, message = refused(guided_job, allowed, **body)
    assert (got, named) == (status, field), message
    assert expected in message


def test_constraints_need_allow_constraints():
    status, field, message = refused(guided_job, ALLOWED, target_prefix=["a", ""])
    assert (status, field) == (422, "target_prefix")
    assert "--allow-constraints" in message


def test_guides_are_encoded_and_unknown_pieces_refused():
    from keras_transformer.data.tokenizer import train_tokenizer
    from tests.helpers import make_corpus

    # Without byte fallback an unseen character is the unknown piece.
    tokenizer = train_tokenizer(make_corpus(), 120, byte_fallback=False)
    made = guided_job(constraints=[["dog"], []], target_prefix=["", "the"])
    guides = jobs.encode_guides(made, tokenizer, allow_unk=False)
    assert [g[0] for g in guides] == ["a", "b"]
    assert guides[0][1] == tokenizer.encode(["dog"]) and guides[0][2] == []
    assert guides[1][1] == [] and guides[1][2] == tokenizer.encode(["the"])[0]
    unknown = guided_job(constraints=[[], ["中"]])
    status, field, message = refused(jobs.encode_guides, unknown, tokenizer, False)
    assert (status, field) == (422, "constraints[1][0]")
    assert "could never be met" in message


def test_alignment_layer_needs_details():
    status, field, message = refused(job, texts=["a"], alignment_layer=0)
    assert (status, field) == (422, "alignment_layer") and "details" in message
    assert job(texts=["a"], details=True, alignment_layer=-1).alignment_layer == -1


def test_a_valid_request_gets_the_servers_settings_with_its_changes():
    made = job(texts=["a", ""], beam_size=2, alpha=0)
    assert made.settings == SearchSettings(beam_size=2, alpha=0.0)
    assert made.n_best == 2
    assert job(texts=["a"], beam_size=3, n_best=1).n_best == 1


def test_the_body_limit_fits_the_largest_valid_request():
    import json

    limits = ServeOptions()  # The defaults: the fixed slack is small beside them.
    for character in ("\u00e9", "\U0001f600"):  # 6 bytes escaped; 12 (a pair).
        texts = [character * limits.max_text_chars] * limits.max_texts
        largest = {"texts": texts, "beam_size": 8, "n_best": 8, "alpha": 0.25}
        body = json.dumps(largest).encode()
        assert len(body) <= limits.max_body_bytes, character


def test_serve_options_refuse_a_request_that_could_never_be_queued():
    with pytest.raises(ValueError, match="max_texts .* more than max_queue"):
        ServeOptions(max_texts=10, max_queue=5)
    with pytest.raises(ValueError, match=r"max_batch_size \(--max-batch-size\)"):
        ServeOptions(max_batch_size=-1)


def test_which_engines_decode_batches_side_by_side(monkeypatch):
    from keras_transformer.serving import server

    monkeypatch.setattr(server, "available_cores", lambda: 2)
    assert server.decode_workers("ctranslate2", 0) == 2
    assert server.decode_workers("ctranslate2", 5) == 5
    assert server.decode_workers("onnx", 0) == 2
    assert server.default_threads(2) == 1  # One core left beside the HTTP side.
    assert server.decode_workers("keras", 0, "jax") == 2
    assert server.decode_workers("keras", 3, "tensorflow") == 3
    assert server.decode_workers("keras", 0, "torch") == 1
    with pytest.raises(ValueError, match="--workers 2: the keras engine on torch"):
        server.decode_workers("keras", 2, "torch")
    assert server.decode_workers("savedmodel", 1) == 1
    with pytest.raises(ValueError, match="--workers 2: the savedmodel engine decodes"):
        server.decode_workers("savedmodel", 2)
    monkeypatch.setattr(server, "available_cores", lambda: 1)
    assert server.decode_workers("ctranslate2", 0) == 1
    assert server.decode_workers("keras", 0, "jax") == 1
    assert server.default_batch_size("keras") == 8
    assert server.default_batch_size("ctranslate2") == 32
    monkeypatch.setattr(server, "available_cores", lambda: 16)
    assert server.default_threads(2) == 7


def test_other_addresses_than_loopback_need_allow_remote():
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        check_host(host, allow_remote=False)
    with pytest.raises(ValueError, match="not a loopback address.*--allow-remote"):
        check_host("0.0.0.0", allow_remote=False)
    check_host("0.0.0.0", allow_remote=True)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--host", "0.0.0.0"], "--allow-remote"),
        (["--max-texts", "300"], "more than max_queue"),
        (["--engine", "keras", "--export-dir", "x"], "--export-dir is for --engine"),
        (["--beam-size", "0"], "must be >= 1"),
        (["--engine", "savedmodel", "--workers", "3"], "the savedmodel engine"),
        (["--workers", "-1"], "must be >= 0"),
        (["--workers", "65"], "must be <= 64"),
        (["--allowed-beam-sizes", "1,x"], "'x' is not an integer"),
        (["--allowed-beam-sizes", "0,4"], "0 is not a beam size"),
        (["--allowed-beam-sizes", "1,2"], "must hold the server's own --beam-size 4"),
        (["--allowed-alphas", "1.0"], "own --beam-size 4 and --alpha 0.6"),
        (  # A request for beam 4 without an alpha would search with 0.6.
            [
                "--beam-size",
                "1",
                "--allowed-beam-sizes",
                "1,4",
                "--allowed-alphas",
                "1",
            ],
            "own --beam-size 1 and --alpha 0.6",
        ),
        (["--allowed-sampling", "top-k"], "'top-k' is not METHOD:VALUE[:TEMPER"),
        (["--allowed-sampling", "beam:4"], "with METHOD top-k or top-p"),
        (["--allowed-sampling", "top-k:0"], "'top-k:0': top_k (--top-k) must be >="),
        (["--allowed-sampling", "top-p:1.5"], "top_p (--top-p) must be <= 1"),
        (["--allowed-sampling", "top-k:x"], "'top-k:x': invalid literal for int"),
        (["--allowed-sampling", "top-k:9:0"], "temperature (--temperature) must"),
        (["--header-timeout-s", "0"], "must be > 0.0"),
        (
            ["--ensemble", "/nonexistent/run", "--engine", "ctranslate2"],
            "--ensemble needs --engine keras",
        ),  # fmt: skip
        (["--max-requests-per-connection", "-1"], "must be >= 0"),
        (["--source-language", "english!"], "--source-language"),
        (["--api-key-file", "missing-key"], "--api-key-file missing-key"),
        (["--log-format", "xml"], "invalid choice: 'xml'"),
    ],
)
def test_serve_refuses_bad_flags_before_loading(tmp_path, capsys, argv, expected):
    status = None
    try:
        status = main(["serve", "--run-dir", str(tmp_path), *argv])
    except SystemExit as exit_:  # argparse's own range checks
        status = exit_.code
    assert status == 2
    assert expected in capsys.readouterr().err
