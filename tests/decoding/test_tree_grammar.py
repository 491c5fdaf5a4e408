"""`TreeGrammar`: the parsing search writes only trees over the input words.

The mask is checked token by token against what `delinearize` accepts, and
as a property of whole searches: every output of an untrained model (which
left alone writes no tree at all) reads back without a repair, greedy and
beam, with and without the words in the targets, cached or not, in
segments or as one program.
"""

from __future__ import annotations

import numpy as np
import pytest

from keras_transformer import build_transformer
from keras_transformer.config import EOS_ID, PAD_ID
from keras_transformer.data.tasks import pointer_bracket_ids
from keras_transformer.data.tokenizer import WordTokenizer
from keras_transformer.decoding.generator import SequenceGenerator
from keras_transformer.decoding.translator import Translator
from keras_transformer.decoding.tree_grammar import TreeGrammar
from keras_transformer.parsing.linearize import delinearize
from tests.helpers import set_seeded_weights, small_config

LABELS = ("S", "NP", "VP", "PP")
TAGS = ("NN", "VB", "DT", "IN")
WORDS = ("the", "dog", "runs", "in", "park", ".")
VOCABULARY = [
    "<pad>",
    "<unk>",
    "<s>",
    "</s>",
    *(f"({label}" for label in LABELS),
    *(f"){label}" for label in LABELS),
    *TAGS,
    *WORDS,
]
TOKENIZER = WordTokenizer(VOCABULARY)
ID = {token: index for index, token in enumerate(VOCABULARY)}
OPENS = {ID[f"({label}"] for label in LABELS}
# A tag is any atom that is not a bracket: the words too (the model picks).
TAG_IDS = {ID[token] for token in (*TAGS, *WORDS)}


def sentences(count: int, seed: int = 0) -> list[str]:
    """Random sentences of 1-8 words, some outside the vocabulary (<unk>)."""
    rng = np.random.default_rng(seed)
    pool = [*WORDS, "zebra", "quietly"]
    return [" ".join(rng.choice(pool, rng.integers(1, 9))) for _ in range(count)]


def untrained_model(**changes):
    """A one-layer model of the vocabulary, seeded, untrained."""
    config = small_config(
        vocab_size=len(VOCABULARY),
        d_model=16,
        d_ff=32,
        num_heads=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        **changes,
    )
    model = build_transformer(config)
    set_seeded_weights(model, seed=0, eos_bias=2.0)
    return model


@pytest.fixture(scope="module")
def model():
    return untrained_model()


def allowed_after(grammar, prefix, words, limit=40):
    """The token strings `grammar` allows after `prefix` (token strings)
    for a sentence of `words` (strings), at step len(prefix)."""
    from keras import ops

    source = np.array([TOKENIZER.encode([" ".join(words)])[0]], np.int32)
    state = grammar.start(ops.convert_to_tensor(source), np.array([limit], np.int32))
    for token in prefix:
        state = grammar.update(state, ops.convert_to_tensor([ID[token]], "int32"))
    mask = grammar.allowed(state, len(prefix), ops.convert_to_tensor(source))
    return {VOCABULARY[i] for i in np.flatnonzero(ops.convert_to_numpy(mask)[0])}


def names(ids) -> set[str]:
    return {VOCABULARY[i] for i in ids}


def test_the_mask_step_by_step_without_words():
    grammar = TreeGrammar(VOCABULARY)
    opens, tags = names(OPENS), names(TAG_IDS)
    words = ["dog", "runs"]
    assert allowed_after(grammar, [], words) == opens  # the root first
    # A phrase with no child cannot close; the root not before every word.
    assert allowed_after(grammar, ["(S"], words) == opens | tags
    assert allowed_after(grammar, ["(S", "NN"], words) == opens | tags
    assert allowed_after(grammar, ["(S", "NN", "(VP"], words) == opens | tags
    # No word left: no tag, no phrase; only the innermost label closes.
    assert allowed_after(grammar, ["(S", "NN", "(VP", "VB"], words) == {")VP"}
    assert allowed_after(grammar, ["(S", "NN", "(VP", "VB", ")VP"], words) == {")S"}
    done = ["(S", "NN", "(VP", "VB", ")VP", ")S"]
    assert allowed_after(grammar, done, words) == {"</s>"}  # one root
    # A non-root phrase closes while words remain.
    assert ")NP" in allowed_after(grammar, ["(S", "(NP", "DT"], ["the", "dog"])


def test_with_words_a_tag_is_followed_by_its_words_id():
    grammar = TreeGrammar(VOCABULARY, with_words=True)
    assert allowed_after(grammar, ["(S", "NN"], ["dog", "runs"]) == {"dog"}
    # A word outside the vocabulary is <unk> in the source: its copy too.
    assert allowed_after(grammar, ["(S", "NN"], ["zebra"]) == {"<unk>"}
    after_copy = allowed_after(grammar, ["(S", "NN", "dog"], ["dog", "runs"])
    assert after_copy == names(OPENS) | names(TAG_IDS)


def test_the_length_limit_leaves_room_to_finish():
    grammar = TreeGrammar(VOCABULARY)
    # One word needs "(S NN )S </s>": with exactly 4 positions no phrase
    # can open inside the root, and the tag must come now.
    assert allowed_after(grammar, ["(S"], ["dog"], limit=4) == names(TAG_IDS)
    assert allowed_after(grammar, ["(S"], ["dog"], limit=6) > names(TAG_IDS)
    # Too short to write any tree: nothing is allowed (the row decodes
    # unmasked, and `delinearize` repairs it).
    assert allowed_after(grammar, [], ["dog", "runs"], limit=3) == set()


def test_vocabularies_that_are_not_a_parsers_are_refused():
    with pytest.raises(ValueError, match="not a parsing model"):
        TreeGrammar(["<pad>", "<unk>", "<s>", "</s>", "dog", "runs"])

    class Pieces:
        kind = "sentencepiece"

    with pytest.raises(ValueError, match="--no-tree-constraints"):
        TreeGrammar.for_tokenizer(Pieces())
    with pytest.raises(ValueError, match="max_depth"):
        TreeGrammar(VOCABULARY, max_depth=0)


def repairs(outputs, texts, with_words):
    return [
        delinearize(output.split(), text.split(), with_words=with_words).repairs
        for output, text in zip(outputs, texts, strict=True)
    ]


SEARCH = dict(max_extra_length=30, allow_unk=True)


@pytest.mark.backend_neutral
def test_an_untrained_model_alone_writes_no_tree(model):
    """What the tests below rely on: the property is not given."""
    texts = sentences(8)
    free = Translator(model, TOKENIZER, batch_size=4, beam_size=1, **SEARCH)
    assert all(repairs(free(texts), texts, with_words=False))


# The four searches in the neutral suite (fast, eager on torch); every
# backend's compiled beam search with the copies runs in the test below.
@pytest.mark.backend_neutral
@pytest.mark.parametrize("with_words", [False, True])
@pytest.mark.parametrize("beam_size", [1, 4])
def test_every_output_of_an_untrained_model_is_a_tree(model, with_words, beam_size):
    texts = sentences(12, seed=beam_size)
    grammar = TreeGrammar.for_tokenizer(TOKENIZER, with_words=with_words)
    bound = Translator(
        model, TOKENIZER, batch_size=4, grammar=grammar, beam_size=beam_size, **SEARCH
    )
    assert repairs(bound(texts), texts, with_words) == [()] * len(texts)


@pytest.fixture(scope="module")
def pointer_model():
    """The model with a word pointer (`--word-pointer`), untrained."""
    return untrained_model(pointer_bracket_ids=pointer_bracket_ids(VOCABULARY))


def test_the_pointer_skips_the_brackets_only():
    skipped = {VOCABULARY[i] for i in pointer_bracket_ids(VOCABULARY)}
    assert skipped == {f"{side}{label}" for side in "()" for label in LABELS}


@pytest.mark.parametrize("with_pointer", [False, True])
def test_segments_whole_and_uncached_searches_agree(model, pointer_model, with_pointer):
    """The grammar's state rides with the beams through every path, each
    output a tree: a batch of 12 that shrinks as rows finish while its
    caches grow, the whole search as one program, and the uncached search.
    A word pointer's cache and states ride along the same way (tags only:
    the pointer replaces the copies)."""
    with_words = not with_pointer
    model = pointer_model if with_pointer else model
    grammar = TreeGrammar.for_tokenizer(TOKENIZER, with_words=with_words)
    settings = dict(beam_size=4, **SEARCH)
    segmented = SequenceGenerator(model, grammar=grammar, **settings)
    whole = SequenceGenerator(model, grammar=grammar, drop_finished=False, **settings)
    uncached = SequenceGenerator(
        model, grammar=grammar, cached=False, drop_finished=False, **settings
    )
    texts = sentences(12, seed=3)
    source = np.zeros((12, 8), np.int32)
    for row, ids in enumerate(TOKENIZER.encode(texts)):
        source[row, : len(ids)] = ids
    outputs = segmented(source)[0]
    np.testing.assert_array_equal(whole(source)[0], outputs)
    np.testing.assert_array_equal(uncached(source)[0], outputs)
    ends = (PAD_ID, EOS_ID)
    best = [" ".join(VOCABULARY[i] for i in r if i not in ends) for r in outputs[:, 0]]
    assert repairs(best, texts, with_words=with_words) == [()] * len(texts)


def test_given_tags_leave_only_that_tag_for_each_word():
    grammar = TreeGrammar(VOCABULARY)
    from keras import ops

    source = ops.convert_to_tensor(np.array([TOKENIZER.encode(["the dog"])[0]]))
    given = ops.convert_to_tensor(np.array([[ID["DT"], -1]], np.int32))
    state = grammar.start(source, np.array([40], np.int32), given)

    def allowed(prefix):
        current = state
        for token in prefix:
            current = grammar.update(current, ops.convert_to_tensor([ID[token]]))
        mask = ops.convert_to_numpy(grammar.allowed(current, len(prefix), source))
        return {VOCABULARY[i] for i in np.flatnonzero(mask[0])}

    # Word 1's tag is given: DT alone among the tags; word 2's (-1) is free.
    assert allowed(["(S"]) == names(OPENS) | {"DT"}
    assert allowed(["(S", "DT"]) == names(OPENS) | names(TAG_IDS)


def test_given_tags_that_the_model_cannot_write_are_refused():
    grammar = TreeGrammar(VOCABULARY)
    assert grammar.given_tag_ids(["NN", None, "DT"], "s") == [ID["NN"], -1, ID["DT"]]
    with pytest.raises(ValueError, match="line 3, word 2: the tag 'JJ' is not"):
        grammar.given_tag_ids(["NN", "JJ"], "line 3")
    with pytest.raises(ValueError, match="the tag '\\(NP' is not"):
        grammar.given_tag_ids(["(NP"], "line 1")  # a bracket is no tag


@pytest.mark.backend_neutral
@pytest.mark.parametrize("beam_size", [1, 4])
def test_every_output_keeps_the_given_tags(pointer_model, beam_size):
    """A property of whole searches of an untrained model with a pointer:
    every output is a tree over the words whose tags are the given ones
    (random tags, some left free), in batches the search shrinks."""
    texts = sentences(12, seed=5)
    rng = np.random.default_rng(beam_size)
    given = [
        [str(rng.choice(TAGS)) if rng.random() < 0.8 else None for _ in text.split()]
        for text in texts
    ]
    grammar = TreeGrammar.for_tokenizer(TOKENIZER)
    bound = Translator(
        pointer_model,
        TOKENIZER,
        batch_size=4,
        grammar=grammar,
        beam_size=beam_size,
        **SEARCH,
    )
    outputs = bound(texts, given)
    assert repairs(outputs, texts, with_words=False) == [()] * len(texts)
    for output, text, tags in zip(outputs, texts, given, strict=True):
        written = delinearize(output.split(), text.split()).tree.tags()
        assert all(t is None or t == w for t, w in zip(tags, written, strict=True))
    assert any(t is not None for tags in given for t in tags)


def test_given_tags_are_checked_against_the_sentences(model):
    grammar = TreeGrammar.for_tokenizer(TOKENIZER)
    bound = Translator(model, TOKENIZER, grammar=grammar, **SEARCH)
    with pytest.raises(ValueError, match="sentence 2: 1 given tags for 2 words"):
        bound(["dog", "the dog"], [["NN"], ["DT"]])
    with pytest.raises(ValueError, match="Given tags for 1 sentences; there are 2"):
        bound(["dog", "the dog"], [["NN"]])
    free = Translator(model, TOKENIZER, **SEARCH)
    with pytest.raises(ValueError, match="need the tree grammar"):
        free(["dog"], [["NN"]])
