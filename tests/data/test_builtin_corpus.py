"""Tests for the built-in grammar-generated English→German corpus."""

import collections
import hashlib
import json
import re
import time
from importlib import resources

import pytest

from keras_transformer.data import builtin_corpus as bc
from keras_transformer.data.builtin_corpus import (
    NP,
    PP,
    Clause,
    generate_corpus,
    generate_examples,
    render_np,
    render_pp,
    render_sentence,
)

pytestmark = pytest.mark.backend_neutral

TOKEN = re.compile(r"[\w']+")


@pytest.fixture(scope="module")
def examples():
    return generate_examples(num_train=4000, num_valid=200, num_test=200, seed=7)


# --------------------------------------------------------------------------
# Determinism, sizes, splits.
# --------------------------------------------------------------------------


def test_same_seed_gives_identical_output():
    a = generate_corpus(800, 40, 40, seed=3)
    b = generate_corpus(800, 40, 40, seed=3)
    assert repr(a).encode() == repr(b).encode()


def test_different_seeds_give_different_corpora():
    a = generate_corpus(800, 40, 40, seed=3)
    b = generate_corpus(800, 40, 40, seed=4)
    for split in ("train", "valid", "test"):
        assert a[split] != b[split]


def test_default_sizes_and_speed():
    start = time.perf_counter()
    corpus = generate_corpus()
    elapsed = time.perf_counter() - start
    assert list(corpus) == ["train", "valid", "test"]
    assert [len(corpus[s]) for s in corpus] == [20000, 500, 500]
    assert elapsed < 10.0  # about 2 s on the development machine
    for pairs in corpus.values():
        assert all(isinstance(en, str) and isinstance(de, str) for en, de in pairs)


# SHA-256 of the default corpus, every pair as a "split<TAB>english<TAB>german\n"
# line (train, valid, test), recorded before the lexicon moved from Python
# tables into builtin_lexicon.json. Any change to the lexicon or the grammar
# that alters the corpus makes runs on it incomparable with earlier ones.
DEFAULT_CORPUS_SHA256 = (
    "df3e4e216e89e7105f058337c15038f43f31f53720ae341c8f2abc53ba01d31a"
)


def test_default_corpus_is_unchanged():
    corpus = generate_corpus(num_train=20000, num_valid=500, num_test=500, seed=1234)
    digest = hashlib.sha256()
    for split in ("train", "valid", "test"):
        for en, de in corpus[split]:
            digest.update(f"{split}\t{en}\t{de}\n".encode())
    assert digest.hexdigest() == DEFAULT_CORPUS_SHA256


def test_lexicon_is_package_data():
    resource = resources.files("keras_transformer.data") / "builtin_lexicon.json"
    lexicon = json.loads(resource.read_text(encoding="utf-8"))
    assert len(lexicon["nouns"]) == len(bc.NOUNS)
    assert len(lexicon["verbs"]) == len(bc.VERBS)
    assert len(lexicon["adjectives"]) == len(bc.ADJECTIVES)
    assert all("|" in row for row in lexicon["nouns"])


@pytest.mark.parametrize("sizes", [(50, 0, 0), (300, 7, 11), (1000, 0, 25)])
def test_requested_sizes(sizes):
    corpus = generate_corpus(*sizes, seed=1)
    assert tuple(len(corpus[s]) for s in ("train", "valid", "test")) == sizes


def test_no_pair_in_two_splits_and_no_duplicates(examples):
    pairs = {s: [(e.english, e.german) for e in examples[s]] for s in examples}
    assert not set(pairs["train"]) & set(pairs["test"])
    assert not set(pairs["train"]) & set(pairs["valid"])
    assert not set(pairs["valid"]) & set(pairs["test"])
    for split_pairs in pairs.values():
        assert len(set(split_pairs)) == len(split_pairs)


def test_held_out_combinations(examples):
    seed = 7
    train_keys = {k for e in examples["train"] for k in e.keys}
    assert not any(bc.is_held_out(k, seed) for k in train_keys)
    for split in ("valid", "test"):
        for ex in examples[split]:
            assert any(bc.is_held_out(k, seed) for k in ex.keys), ex
            # Independent of is_held_out: something in the pair is unseen.
            assert set(ex.keys) - train_keys, ex


def test_evaluation_words_occur_in_training(examples):
    for lang in ("english", "german"):
        vocab = {t for e in examples["train"] for t in TOKEN.findall(getattr(e, lang))}
        for split in ("valid", "test"):
            words = {
                t for e in examples[split] for t in TOKEN.findall(getattr(e, lang))
            }
            assert words <= vocab, (lang, split, words - vocab)


def test_construction_mix_and_lengths(examples):
    train = examples["train"]
    shares = collections.Counter(e.construction for e in train)
    assert set(shares) == set(bc.CONSTRUCTIONS)
    for count in shares.values():
        assert 0.05 < count / len(train) < 0.14
    lengths = [len(e.english.split()) for e in train]
    assert all(4 <= n <= 25 for n in lengths)
    assert sum(n >= 5 for n in lengths) / len(lengths) > 0.85
    two_clause = {"weil", "dass", "wenn", "coordination"}
    assert sum(e.construction in two_clause for e in train) / len(train) > 0.3


def test_capitalisation_and_punctuation(examples):
    nouns = {n.de for n in bc.NOUNS.values()} | {n.de_pl for n in bc.NOUNS.values()}
    adjective_forms = {
        stem + ending
        for _, stem, _ in bc.ADJECTIVES.values()
        for ending in ("e", "en", "er", "es", "em")
    }  # "jungen" is an adjective, "Jungen" a noun
    verb_forms = {f for v in bc.VERBS.values() for f in (*v.forms, v.lemma, v.root)}
    lower_nouns = {n.lower() for n in nouns if n != "-"} - adjective_forms - verb_forms
    for e in examples["train"]:
        for text in (e.english, e.german):
            assert text[0].isupper() and text[-1] in ".?", text
            assert "  " not in text and " ," not in text
        # German nouns are capitalised: no lower-case spelling of a noun.
        assert not lower_nouns & set(e.german[:-1].split()), e.german


# --------------------------------------------------------------------------
# Lexicon.
# --------------------------------------------------------------------------


def test_lexicon_sizes():
    sizes = bc.lexicon_size()
    assert sizes == bc.LEXICON_SIZES
    assert sizes["english"] >= 300 and sizes["german"] >= 300
    assert len(bc.NOUNS) >= 120
    assert len({v.lemma for v in bc.VERBS.values()}) >= 80
    assert len(bc.ADJECTIVES) >= 50
    assert len(bc.NAMES) >= 30
    assert {n.gender for n in bc.NOUNS.values()} == {"m", "f", "n"}


@pytest.mark.parametrize(
    "verb, forms",
    [
        ("fahren", "fahre fährst fährt fahren fahrt fahren"),
        ("lesen", "lese liest liest lesen lest lesen"),
        ("essen", "esse isst isst essen esst essen"),
        ("arbeiten", "arbeite arbeitest arbeitet arbeiten arbeitet arbeiten"),
        ("öffnen", "öffne öffnest öffnet öffnen öffnet öffnen"),
        ("tanzen", "tanze tanzt tanzt tanzen tanzt tanzen"),
        ("wandern", "wandere wanderst wandert wandern wandert wandern"),
        ("einladen", "lade lädst lädt laden ladet laden"),
        ("haben", "habe hast hat haben habt haben"),
        ("wissen#s", "weiß weißt weiß wissen wisst wissen"),
    ],
)
def test_present_tense_conjugation(verb, forms):
    assert " ".join(bc.VERBS[verb].forms) == forms


# --------------------------------------------------------------------------
# Golden examples rendered from fixed clause specifications.
# --------------------------------------------------------------------------

MAN, WOMAN, DOG = NP("noun", "Mann"), NP("noun", "Frau"), NP("noun", "Hund")
CHILDREN = NP("noun", "Kind", plural=True)
A_BOOK = NP("noun", "Buch", det="indef")
HIS, HER = ("his", "sein"), ("her", "ihr")

GOLDEN = [
    # V2 with a fronted adverbial.
    (
        [Clause(MAN, "lesen", obj=A_BOOK, adv="heute", front=True)],
        "",
        "Today the man reads a book.",
        "Heute liest der Mann ein Buch.",
    ),
    # Perfect with haben, participle last, adjective agreement.
    (
        [Clause(WOMAN, "kaufen", obj=NP("noun", "Auto", adj="rot"), tense="perf")],
        "",
        "The woman has bought the red car.",
        "Die Frau hat das rote Auto gekauft.",
    ),
    # Perfect with sein.
    (
        [Clause(MAN, "fahren", pp=PP("dircity", NP("city", "Wien")), tense="perf")],
        "",
        "The man has driven to Vienna.",
        "Der Mann ist nach Wien gefahren.",
    ),
    (
        [Clause(NP("pron", "1pl"), "gehen", pp=PP("dir", None), tense="perf")],
        "",
        "We have gone home.",
        "Wir sind nach Hause gegangen.",
    ),
    (
        [Clause(NP("name", "Peter"), "essen", obj=NP("noun", "Apfel"), tense="perf")],
        "",
        "Peter has eaten the apple.",
        "Peter hat den Apfel gegessen.",
    ),
    # Separable verb: main clause, perfect, subordinate clause.
    (
        [
            Clause(
                NP("name", "Anna"),
                "anrufen",
                obj=NP("noun", "Mutter", det="poss", poss=HER),
            )
        ],
        "",
        "Anna calls her mother.",
        "Anna ruft ihre Mutter an.",
    ),
    (
        [
            Clause(
                NP("name", "Peter"),
                "anrufen",
                obj=NP("noun", "Vater", det="poss", poss=HIS),
                tense="perf",
            )
        ],
        "",
        "Peter has called his father.",
        "Peter hat seinen Vater angerufen.",
    ),
    (
        [
            Clause(NP("noun", "Junge"), "bleiben", pp=PP("loc", None)),
            Clause(
                NP("pron", "3sg.m"),
                "anrufen",
                obj=NP("noun", "Mutter", det="poss", poss=HIS),
            ),
        ],
        "weil",
        "The boy stays at home, because he calls his mother.",
        "Der Junge bleibt zu Hause, weil er seine Mutter anruft.",
    ),
    (
        [
            Clause(
                NP("pron", "3sg.f"), "aufstehen", adv="heute", front=True, tense="perf"
            )
        ],
        "",
        "Today she has gotten up.",
        "Heute ist sie aufgestanden.",
    ),
    (
        [Clause(NP("name", "Anna"), "abholen", obj=NP("pron", "3sg.m"))],
        "",
        "Anna picks him up.",
        "Anna holt ihn ab.",
    ),
    # Modal + infinitive at the end (also with a separable verb).
    (
        [
            Clause(
                CHILDREN,
                "spielen",
                pp=PP("loc", NP("noun", "Garten")),
                tense="modal",
                modal="wollen",
            )
        ],
        "",
        "The children want to play in the garden.",
        "Die Kinder wollen im Garten spielen.",
    ),
    (
        [
            Clause(
                NP("pron", "2sg"),
                "einkaufen",
                tense="modal",
                modal="können",
                pp=PP("loc", NP("noun", "Markt")),
            )
        ],
        "",
        "You can go shopping at the market.",
        "Du kannst auf dem Markt einkaufen.",
    ),
    # weil-clause, verb last; wenn-clause first makes the main clause verb-first.
    (
        [Clause(CHILDREN, "bleiben", pp=PP("loc", None)), Clause(DOG, "schlafen")],
        "weil",
        "The children stay at home, because the dog sleeps.",
        "Die Kinder bleiben zu Hause, weil der Hund schläft.",
    ),
    (
        [
            Clause(CHILDREN, "bleiben", pp=PP("loc", None)),
            Clause(NP("pron", "3sg.n"), "regnen"),
        ],
        ("wenn", True),
        "If it rains, the children stay at home.",
        "Wenn es regnet, bleiben die Kinder zu Hause.",
    ),
    (
        [
            Clause(NP("name", "Maria"), "sagen#s"),
            Clause(WOMAN, "kaufen", obj=NP("noun", "Auto"), tense="perf"),
        ],
        "dass",
        "Maria says that the woman has bought the car.",
        "Maria sagt, dass die Frau das Auto gekauft hat.",
    ),
    # Dative prepositions with contractions; accusative prepositions.
    (
        [Clause(NP("noun", "Kind"), "gehen", pp=PP("dir", NP("noun", "Schule")))],
        "",
        "The child goes to the school.",
        "Das Kind geht zur Schule.",
    ),
    (
        [Clause(DOG, "schlafen", pp=PP("loc", NP("noun", "Park")))],
        "",
        "The dog sleeps in the park.",
        "Der Hund schläft im Park.",
    ),
    (
        [Clause(MAN, "kommen", pp=PP("src", NP("noun", "Bahnhof")))],
        "",
        "The man comes from the station.",
        "Der Mann kommt vom Bahnhof.",
    ),
    (
        [Clause(WOMAN, "spielen", pp=PP("com", DOG))],
        "",
        "The woman plays with the dog.",
        "Die Frau spielt mit dem Hund.",
    ),
    (
        [Clause(WOMAN, "kaufen", obj=A_BOOK, pp=PP("ben", NP("noun", "Lehrer")))],
        "",
        "The woman buys a book for the teacher.",
        "Die Frau kauft ein Buch für den Lehrer.",
    ),
    (
        [Clause(CHILDREN, "laufen", pp=PP("path", NP("noun", "Wald")))],
        "",
        "The children run through the forest.",
        "Die Kinder laufen durch den Wald.",
    ),
    # Negation: kein for indefinite objects, nicht otherwise; do-support.
    (
        [Clause(MAN, "haben", obj=NP("noun", "Hund", det="indef"), neg=True)],
        "",
        "The man does not have a dog.",
        "Der Mann hat keinen Hund.",
    ),
    (
        [Clause(MAN, "lesen", obj=NP("noun", "Buch"), neg=True)],
        "",
        "The man does not read the book.",
        "Der Mann liest das Buch nicht.",
    ),
    (
        [
            Clause(
                CHILDREN,
                "spielen",
                pp=PP("loc", NP("noun", "Garten")),
                neg=True,
                tense="perf",
            )
        ],
        "",
        "The children have not played in the garden.",
        "Die Kinder haben nicht im Garten gespielt.",
    ),
    (
        [
            Clause(
                NP("pron", "1sg"),
                "trinken",
                obj=NP("noun", "Kaffee", det="indef"),
                neg=True,
                tense="modal",
                modal="dürfen",
            )
        ],
        "",
        "I may not drink coffee.",
        "Ich darf keinen Kaffee trinken.",
    ),
    # Numbers with plurals; dative object and ditransitive order.
    (
        [
            Clause(
                NP("noun", "Hund", det="num", plural=True, num=3),
                "schlafen",
                pp=PP("loc", NP("noun", "Garten")),
            )
        ],
        "",
        "Three dogs sleep in the garden.",
        "Drei Hunde schlafen im Garten.",
    ),
    (
        [Clause(MAN, "geben", obj=NP("noun", "Kind"), obj2=A_BOOK)],
        "",
        "The man gives the child a book.",
        "Der Mann gibt dem Kind ein Buch.",
    ),
    (
        [Clause(NP("noun", "Student", det="indef"), "helfen", obj=NP("noun", "Junge"))],
        "",
        "A student helps the boy.",
        "Ein Student hilft dem Jungen.",
    ),
    # Copula with a predicate adjective.
    (
        [Clause(NP("noun", "Wetter"), "sein", adj="schön", neg=True)],
        "",
        "The weather is not beautiful.",
        "Das Wetter ist nicht schön.",
    ),
]


@pytest.mark.parametrize("clauses, link, english, german", GOLDEN)
def test_golden_sentences(clauses, link, english, german):
    link, sub_first = link if isinstance(link, tuple) else (link, False)
    assert render_sentence(clauses, link, sub_first) == (english, german)


@pytest.mark.parametrize(
    "clause, english, german",
    [
        (
            Clause(MAN, "lesen", obj=A_BOOK),
            "Does the man read a book?",
            "Liest der Mann ein Buch?",
        ),
        (
            Clause(WOMAN, "kaufen", obj=NP("noun", "Auto"), tense="perf"),
            "Has the woman bought the car?",
            "Hat die Frau das Auto gekauft?",
        ),
        (
            Clause(NP("pron", "3pl"), "mitkommen", tense="modal", modal="wollen"),
            "Do they want to come along?",
            "Wollen sie mitkommen?",
        ),
    ],
)
def test_golden_questions(clause, english, german):
    assert render_sentence([clause], question=True) == (english, german)


@pytest.mark.parametrize(
    "det, case, english, german",
    [
        ("def", "nom", "the old man", "der alte Mann"),
        ("def", "acc", "the old man", "den alten Mann"),
        ("def", "dat", "the old man", "dem alten Mann"),
        ("indef", "nom", "an old man", "ein alter Mann"),
        ("indef", "acc", "an old man", "einen alten Mann"),
        ("indef", "dat", "an old man", "einem alten Mann"),
    ],
)
def test_adjective_declension_masculine(det, case, english, german):
    assert render_np(NP("noun", "Mann", det=det, adj="alt"), case) == (english, german)


@pytest.mark.parametrize(
    "noun, det, forms",
    [
        ("Frau", "def", ["die kleine Frau", "die kleine Frau", "der kleinen Frau"]),
        (
            "Frau",
            "indef",
            ["eine kleine Frau", "eine kleine Frau", "einer kleinen Frau"],
        ),
        ("Auto", "def", ["das kleine Auto", "das kleine Auto", "dem kleinen Auto"]),
        (
            "Auto",
            "indef",
            ["ein kleines Auto", "ein kleines Auto", "einem kleinen Auto"],
        ),
    ],
)
def test_adjective_declension_feminine_neuter(noun, det, forms):
    np = NP("noun", noun, det=det, adj="klein")
    assert [render_np(np, case)[1] for case in ("nom", "acc", "dat")] == forms


def test_plural_number_and_kein_forms():
    three = NP("noun", "Hund", det="num", plural=True, num=3, adj="schwarz")
    assert [render_np(three, c)[1] for c in ("nom", "acc", "dat")] == [
        "drei schwarze Hunde",
        "drei schwarze Hunde",
        "drei schwarzen Hunden",
    ]
    assert render_np(three, "nom")[0] == "three black dogs"
    assert render_np(NP("noun", "Kind", det="def", plural=True), "dat") == (
        "the children",
        "den Kindern",
    )
    assert render_np(NP("noun", "Buch", det="indef", plural=True), "acc", neg=True) == (
        "books",
        "keine Bücher",
    )
    assert (
        render_np(NP("noun", "Milch", det="indef"), "acc", neg=True)[1] == "keine Milch"
    )
    assert render_np(NP("noun", "Apfel", det="indef"), "acc") == (
        "an apple",
        "einen Apfel",
    )


def test_prepositional_contractions():
    assert render_pp(PP("dir", NP("noun", "Kino"))) == ("to the cinema", "ins Kino")
    assert render_pp(PP("dir", NP("noun", "Bahnhof"))) == (
        "to the station",
        "zum Bahnhof",
    )
    assert render_pp(PP("loc", NP("noun", "Strand"))) == ("on the beach", "am Strand")
    assert render_pp(PP("src", NP("noun", "Arzt"))) == ("from the doctor", "vom Arzt")
    assert render_pp(PP("ohne", NP("noun", "Hund"))) == (
        "without the dog",
        "ohne den Hund",
    )
    assert render_pp(PP("gegen", NP("noun", "Lehrer", det="poss", poss=HIS))) == (
        "against his teacher",
        "gegen seinen Lehrer",
    )
    # No contraction with indefinite articles.
    assert render_pp(PP("loc", NP("noun", "Park", det="indef"))) == (
        "in a park",
        "in einem Park",
    )


# --------------------------------------------------------------------------
# Errors.
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_train": -1}, "num_train must be >= 0, got -1"),
        ({"num_valid": -5}, "num_valid must be >= 0, got -5"),
        ({"num_test": -2}, "num_test must be >= 0, got -2"),
        ({"num_train": 0}, "num_train must be positive, got 0"),
        ({"num_train": 2.5}, "num_train must be an int, got 2.5"),
        ({"num_train": 10**7}, "exceeds"),
    ],
)
def test_bad_sizes_raise(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        generate_corpus(**kwargs)


def test_too_few_distinct_pairs_raise():
    # One training pair cannot cover the vocabulary of 50 test pairs.
    with pytest.raises(ValueError, match="could not produce 50 distinct test pairs"):
        generate_corpus(num_train=1, num_valid=0, num_test=50)
