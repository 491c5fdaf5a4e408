"""Built-in English→German corpus generated from a hand-written grammar.

A fresh machine without network access trains on this corpus.  Every pair comes
from the same clause specification rendered twice, once per language, so the
German is grammatical by construction: gender, case and adjective declension,
verb-second and verb-final order, separable prefixes, perfect auxiliaries,
``kein``/``nicht`` negation and preposition contractions.

Held-out split: each clause has a *combination key* ``"verb>complement"`` (the
German verb lemma and the head lemma of its object, or of its prepositional
phrase; for ``sein`` + adjective it is ``"adjective>subject"``).  About 10 % of
all such keys, chosen by a seeded CRC32 hash, are held out.  ``train`` never
contains a held-out key; every ``valid`` and ``test`` pair contains at least one,
so both evaluation splits measure generalisation to unseen combinations (valid
is drawn like test).  Evaluation pairs are kept only if all their word tokens
occur in the training text of the same language, and no pair occurs in two
splits (train is also deduplicated).

Only the standard library is used and all randomness flows from one
``random.Random(seed)``, so equal arguments give byte-identical corpora.
"""

from __future__ import annotations

import json
import random
import re
import zlib
from bisect import bisect
from dataclasses import dataclass, replace
from importlib import resources
from typing import NamedTuple

# --------------------------------------------------------------------------
# Lexicon, loaded from builtin_lexicon.json (package data).
# --------------------------------------------------------------------------
# Every table is a list of rows, fields separated by "|".  Fields per table:
#
# nouns: en_sg | en_pl | de_sg | de_pl | gender | tags | extra.  "-" as plural
#   marks a mass noun.  extra: "obl=X" is the accusative/dative singular of
#   weak masculine nouns (den Jungen); "eg=X" overrides the natural gender
#   used for English pronouns (das Mädchen -> her).
# places: where a place noun takes which preposition.  German noun | German
#   location preposition (dative) | English location preposition | direction
#   preposition (zu: dative, others accusative; English always "to") | source
#   (dative, English "from") | path preposition (accusative).  "-" = the noun
#   does not take that role.
# fixed: nouns used without an article in German (languages, games,
#   instruments): en | de | tag.
# names: name | gender.  cities: en | de.
# adjectives: en | de | inflection stem ("-" = same) | tags of nouns it may
#   describe.
# verbs: id | English (particle after "+") | English past participle | German
#   participle | aux (h/s) | frame | subject (h human, a any animate, x
#   animal) | object tags ("dat/acc" for ditransitives) | PP kinds | irregular
#   present.  id: German infinitive, a separable prefix is written "an~rufen";
#   "#t" distinguishes a second frame of the same lemma.  Frames: i
#   intransitive, m motion, t accusative, d dative, p:PREP:CASE:EN
#   prepositional object, dt dative+accusative, w weather, s "dass" clause;
#   ":EN" adds an English object preposition.  Irregular present: "du,er"
#   forms (all six: full_forms).
# full_forms: German root | its six present-tense forms.
# modals: German | English for "can/must/may/want to/would like to" | six forms.
# adverbs (time adverbials): English | German | usable in the perfect |
#   usable with negation.
# pronouns: code | en nominative | en object | en possessive | de nom | acc |
#   dat | possessive stem.  English "you all" (2pl) keeps du/ihr apart so the
#   source is not ambiguous.
# numbers_*: one to twenty.  time_words_*: the words of the time adverbials,
#   counted as lemmas (nouns and adverbs).  function_words_*: counted as
#   lemmas too.

_LEXICON_FILE = "builtin_lexicon.json"


def _load_lexicon() -> dict[str, list[str]]:
    """The tables of builtin_lexicon.json (read once, at import)."""
    resource = resources.files("keras_transformer.data").joinpath(_LEXICON_FILE)
    try:
        return json.loads(resource.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        # A non-editable install without package data would end up here.
        raise RuntimeError(
            f"{resource} is missing: it is package data of keras_transformer "
            "(see [tool.setuptools.package-data] in pyproject.toml)."
        ) from error


def _rows(entries: list[str]) -> list[list[str]]:
    """Split "a|b|c" rows of a lexicon table into lists of stripped fields."""
    return [[field.strip() for field in entry.split("|")] for entry in entries]


_LEXICON = _load_lexicon()
_FULL_FORMS = dict(_rows(_LEXICON["full_forms"]))
_MODALS = {de: (en, forms) for de, en, forms in _rows(_LEXICON["modals"])}
_PRONOUNS = {code: tuple(forms) for code, *forms in _rows(_LEXICON["pronouns"])}
_NUMBERS_EN = _LEXICON["numbers_en"]
_NUMBERS_DE = _LEXICON["numbers_de"]
_TIME_WORDS_EN = _LEXICON["time_words_en"]
_TIME_WORDS_DE = _LEXICON["time_words_de"]
_FUNCTION_WORDS_EN = _LEXICON["function_words_en"]
_FUNCTION_WORDS_DE = _LEXICON["function_words_de"]
_PERSON_INDEX = {"1sg": 0, "2sg": 1, "1pl": 3, "2pl": 4, "3pl": 5}  # else 2


# --------------------------------------------------------------------------
# Lexicon objects.
# --------------------------------------------------------------------------


class Noun(NamedTuple):
    en: str
    en_pl: str  # "-" for mass nouns
    de: str
    de_pl: str
    gender: str  # m, f, n
    tags: frozenset[str]
    obl: str  # accusative/dative singular (differs for weak masculines)
    en_gender: str  # natural gender for English possessives: m, f, n

    @property
    def mass(self) -> bool:
        return self.en_pl == "-"


class Verb(NamedTuple):
    key: str
    lemma: str  # German infinitive without "#"-suffix, with prefix
    prefix: str  # separable prefix or ""
    root: str  # infinitive without the separable prefix
    en: str
    en_particle: str
    en_pp: str
    de_pp: str
    aux: str  # "haben" or "sein"
    frame: str  # i, m, t, d, p, dt, w, s (dass-clause)
    en_prep: str  # English object preposition ("look for") or "to"-dative
    de_prep: tuple[str, str]  # (preposition, case) of a prepositional object
    subj: str
    obj_tags: frozenset[str]
    obj2_tags: frozenset[str]
    pp_kinds: tuple[str, ...]
    forms: tuple[str, ...]  # six present-tense forms of the root


def _present_forms(root: str, irregular: str) -> tuple[str, ...]:
    """Conjugate a German verb in the present tense (ich, du, er, wir, ihr, sie)."""
    if root in _FULL_FORMS:
        return tuple(_FULL_FORMS[root].split())
    parts = irregular.split(",") if irregular else []
    stem = root[:-2] if root.endswith("en") else root[:-1]
    # An -e- is inserted after stems in -t/-d and consonant + m/n (du arbeitest,
    # es regnet, du öffnest) but not after vowel/l/r/h + m/n (wohnst, lernst).
    e_insert = stem.endswith(("t", "d", "chn")) or (
        stem[-1] in "mn" and stem[-2] not in "aeiouäöüylrhmn"
    )
    if stem.endswith(("s", "ß", "x", "z")):
        du = stem + "t"
    else:
        du = stem + ("est" if e_insert else "st")
    er = stem + ("et" if e_insert else "t")
    if parts:
        du, er = parts
    return (stem + "e", du, er, root, stem + ("et" if e_insert else "t"), root)


def _parse_nouns() -> dict[str, Noun]:
    nouns = {}
    for en, en_pl, de, de_pl, gender, tags, *extra in _rows(_LEXICON["nouns"]):
        opts = dict(item.split("=") for item in extra if item)
        tagset = frozenset(tags.split())
        obl, en_gender = opts.get("obl", de), opts.get("eg", gender)
        nouns[de] = Noun(en, en_pl, de, de_pl, gender, tagset, obl, en_gender)
    return nouns


def _parse_verbs() -> dict[str, Verb]:
    verbs = {}
    for row in _rows(_LEXICON["verbs"]):
        key, en, en_pp, de_pp, aux, frame, subj, obj, pps, irregular = row
        lemma = key.split("#")[0]
        prefix, _, root = lemma.rpartition("~")
        en_word, _, particle = en.partition("+")
        frame, *fargs = frame.split(":")
        obj_tags, obj2_tags = (obj.split("/") + [""])[:2] if obj != "-" else ("", "")
        de_prep = (fargs[0], fargs[1]) if frame == "p" else ("", "")
        key = key.replace("~", "")
        verbs[key] = Verb(
            key, lemma.replace("~", ""), prefix, root, en_word, particle, en_pp,
            de_pp, "haben" if aux == "h" else "sein", frame,
            fargs[-1] if fargs else "", de_prep, subj, frozenset(obj_tags.split()),
            frozenset(obj2_tags.split()), tuple(pps.split()) if pps != "-" else (),
            _present_forms(root, irregular)
        )  # fmt: skip
    return verbs


NOUNS = _parse_nouns()
VERBS = _parse_verbs()
PLACES = {row[0]: tuple(row[1:]) for row in _rows(_LEXICON["places"])}
FIXED = {de: (en, tag) for en, de, tag in _rows(_LEXICON["fixed"])}
NAMES = dict(_rows(_LEXICON["names"]))
CITIES = {de: en for en, de in _rows(_LEXICON["cities"])}
ADJECTIVES = {
    de: (en, de if stem == "-" else stem, frozenset(tags.split()))
    for en, de, stem, tags in _rows(_LEXICON["adjectives"])
}
ADVERBS = {
    de: (en, perf == "y", neg == "y")
    for en, de, perf, neg in _rows(_LEXICON["adverbs"])
}


def lexicon_size() -> dict[str, int]:
    """Count distinct lemmas per language (nouns, verbs, adjectives, numbers,
    pronouns, names, cities, day/time nouns, adverbs and function words)."""
    counts = {}
    for lang in ("english", "german"):
        en = lang == "english"
        groups = [
            {n.en if en else n.de for n in NOUNS.values()}
            | {e if en else d for d, (e, _) in FIXED.items()},
            {
                (v.en + " " + v.en_particle).strip() if en else v.lemma
                for v in VERBS.values()
            }
            | {e if en else d for d, (e, _) in _MODALS.items()}
            | {"be" if en else "sein"},
            {a[0] if en else d for d, a in ADJECTIVES.items()},
            set(_NUMBERS_EN if en else _NUMBERS_DE),
            {p[0] if en else p[3] for p in _PRONOUNS.values()},
            set(NAMES),
            {e if en else d for d, e in CITIES.items()},
            set(_TIME_WORDS_EN if en else _TIME_WORDS_DE),
            set(_FUNCTION_WORDS_EN if en else _FUNCTION_WORDS_DE),
        ]
        counts[lang] = sum(len(g) for g in groups)
    return counts


LEXICON_SIZES = lexicon_size()

# --------------------------------------------------------------------------
# Clause specifications and rendering.
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class NP:
    """A noun phrase.  ``kind`` is noun, name, pron (``head`` is a person code
    such as "3sg.f"), city or fixed; ``head`` is otherwise the German lemma."""

    kind: str
    head: str
    det: str = "def"  # def | indef | poss | num; indef plural/mass = no article
    plural: bool = False
    adj: str = ""  # German adjective lemma
    num: int = 0
    poss: tuple[str, str] = ("", "")  # (English word, German stem): his/sein


@dataclass(frozen=True)
class PP:
    """A prepositional phrase; ``np`` None means home (zu/nach Hause)."""

    kind: str  # loc res city dir dircity src path com bei ben ohne gegen
    np: NP | None = None


@dataclass(frozen=True)
class Clause:
    """One clause; ``verb`` is a key of ``VERBS`` or "sein" (copula + ``adj``)."""

    subj: NP
    verb: str
    obj: NP | None = None  # accusative/dative/prepositional object
    obj2: NP | None = None  # accusative object of a ditransitive verb
    pp: PP | None = None
    tense: str = "pres"  # pres | perf | modal
    modal: str = ""
    neg: bool = False
    adv: str = ""  # German time adverbial (key of ADVERBS)
    front: bool = False  # adverbial in the Vorfeld (main clauses)
    adj: str = ""


_CASE = {"nom": 0, "acc": 1, "dat": 2}
_DEF = (
    ("der", "die", "das", "die"),
    ("den", "die", "das", "die"),
    ("dem", "der", "dem", "den"),
)
_EIN_END = (("", "e", "", "e"), ("en", "e", "", "e"), ("em", "er", "em", "en"))
# Adjective endings per case and slot (m, f, n, plural): after der (weak),
# after ein/kein/mein (mixed), without article or after numbers (strong).
_WEAK = (("e", "e", "e", "en"), ("en", "e", "e", "en"), ("en",) * 4)
_MIXED = (("er", "e", "es", "en"), ("en", "e", "es", "en"), ("en",) * 4)
_STRONG = (("er", "e", "es", "e"), ("en", "e", "es", "e"), ("em", "er", "em", "en"))
_SLOT = {"m": 0, "f": 1, "n": 2}
_CONTRACTIONS = {
    ("in", "dem"): "im",
    ("an", "dem"): "am",
    ("zu", "dem"): "zum",
    ("zu", "der"): "zur",
    ("bei", "dem"): "beim",
    ("von", "dem"): "vom",
    ("in", "das"): "ins",
    ("an", "das"): "ans",
}
_SEIN = ("bin", "bist", "ist", "sind", "seid", "sind")


def _ein(stem: str, case: int, slot: int) -> str:
    ending = _EIN_END[case][slot]
    return ("eur" if stem == "euer" and ending else stem) + ending


def _person(np: NP) -> str:
    if np.kind == "pron":
        return np.head
    return "3pl" if np.plural or np.num > 1 else "3sg"


def render_np(np: NP, case: str = "nom", neg: bool = False) -> tuple[str, str]:
    """Render a noun phrase in a German case; ``neg`` turns ein/∅ into kein."""
    c = _CASE[case]
    if np.kind == "pron":
        p = _PRONOUNS[np.head]
        return p[0 if case == "nom" else 1], p[3 + c]
    if np.kind == "name":
        return np.head, np.head
    if np.kind == "city":
        return CITIES[np.head], np.head
    if np.kind == "fixed":
        return FIXED[np.head][0], np.head
    n = NOUNS[np.head]
    plural = np.plural or np.num > 1
    slot = 3 if plural else _SLOT[n.gender]
    if plural:  # dative plural adds -n unless the plural ends in -n or -s
        dat_n = case == "dat" and not n.de_pl.endswith(("n", "s"))
        noun_de, noun_en = n.de_pl + ("n" if dat_n else ""), n.en_pl
    else:
        noun_de, noun_en = (n.de if case == "nom" else n.obl), n.en
    if np.det == "def":
        art_en, art_de, table = "the", _DEF[c][slot], _WEAK
    elif np.det == "poss":
        art_en, art_de, table = np.poss[0], _ein(np.poss[1], c, slot), _MIXED
    elif np.det == "num" and np.num > 1:
        art_en, art_de = _NUMBERS_EN[np.num - 1], _NUMBERS_DE[np.num - 1]
        table = _STRONG
    elif np.det == "num":
        art_en, art_de, table = "one", _ein("ein", c, slot), _MIXED
    elif neg:
        art_en = "" if plural or n.mass else "a"
        art_de, table = _ein("kein", c, slot), _MIXED
    elif plural or n.mass:
        art_en, art_de, table = "", "", _STRONG
    else:
        art_en, art_de, table = "a", _ein("ein", c, slot), _MIXED
    adj_en, adj_de = "", ""
    if np.adj:
        adj_en, stem, _ = ADJECTIVES[np.adj]
        adj_de = stem + table[c][slot]
    en = [w for w in (art_en, adj_en, noun_en) if w]
    if art_en == "a" and en[1][0] in "aeiou":
        en[0] = "an"
    return " ".join(en), " ".join(w for w in (art_de, adj_de, noun_de) if w)


def _prep_de(prep: str, np: NP, case: str) -> str:
    """German preposition + NP, contracting with the definite article (im, zur)."""
    de = render_np(np, case)[1]
    if np.kind == "noun" and np.det == "def":
        art, _, rest = de.partition(" ")
        if (prep, art) in _CONTRACTIONS:
            return f"{_CONTRACTIONS[prep, art]} {rest}"
    return f"{prep} {de}"


_HOME = {
    "loc": ("at home", "zu Hause"),
    "res": ("at home", "zu Hause"),
    "dir": ("home", "nach Hause"),
    "dircity": ("home", "nach Hause"),
    "src": ("from home", "von zu Hause"),
}
_CITY_PREP = {
    "loc": ("in", "in"),
    "res": ("in", "in"),
    "city": ("in", "in"),
    "dir": ("to", "nach"),
    "dircity": ("to", "nach"),
    "src": ("from", "aus"),
}
_PERSON_PREP = {
    "com": ("with", "mit", "dat"),
    "bei": ("with", "bei", "dat"),
    "ben": ("for", "für", "acc"),
    "ohne": ("without", "ohne", "acc"),
    "gegen": ("against", "gegen", "acc"),
}
# Shops named after a person: "zum Arzt" = "to the doctor".
_SHOP_PREP = {"dir": ("to", "zu"), "src": ("from", "von")}


def render_pp(pp: PP) -> tuple[str, str]:
    """Render a prepositional phrase with the case its preposition governs."""
    np = pp.np
    if np is None:
        return _HOME[pp.kind]
    if np.kind == "city":
        en_prep, de_prep = _CITY_PREP[pp.kind]
        return f"{en_prep} {CITIES[np.head]}", f"{de_prep} {np.head}"
    if pp.kind in _PERSON_PREP:
        en_prep, de_prep, case = _PERSON_PREP[pp.kind]
    elif np.kind == "noun" and "shop" in NOUNS[np.head].tags:
        (en_prep, de_prep), case = _SHOP_PREP[pp.kind], "dat"
    else:
        loc_de, loc_en, dir_de, src_de, path_de = PLACES[np.head]
        en_prep, de_prep, case = {
            "loc": (loc_en, loc_de, "dat"),
            "res": (loc_en, loc_de, "dat"),
            "dir": ("to", dir_de, "dat" if dir_de == "zu" else "acc"),
            "src": ("from", src_de, "dat"),
            "path": ("through" if path_de == "durch" else "across", path_de, "acc"),
        }[pp.kind]
    return f"{en_prep} {render_np(np, case)[0]}", _prep_de(de_prep, np, case)


def _en_3sg(word: str) -> str:
    if word == "have":
        return "has"
    if word.endswith(("s", "sh", "ch", "x", "z", "o")):
        return word + "es"
    if word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _objects(c: Clause, v: Verb) -> list[tuple[str, NP]]:
    """The verb's objects in German base order (dative before accusative)."""
    if v.frame == "dt":
        return [("dat", c.obj), ("acc", c.obj2)]
    role = {"t": "acc", "d": "dat", "p": "prep"}.get(v.frame)
    return [(role, c.obj)] if role and c.obj else []


def _kein(c: Clause, role: str, np: NP) -> bool:
    """Negated indefinite accusative objects use kein instead of nicht."""
    return c.neg and role == "acc" and np.kind == "noun" and np.det == "indef"


def _render_de(c: Clause, order: str) -> str:
    """German clause; order is main, inverted (V1 after a fronted clause),
    question or sub (verb-final)."""
    i = _PERSON_INDEX.get(_person(c.subj), 2)
    v = VERBS.get(c.verb)
    if v is None:  # copula
        finite, tail, cluster = _SEIN[i], [], [_SEIN[i]]
    elif c.tense == "perf":
        finite = (_SEIN if v.aux == "sein" else VERBS["haben"].forms)[i]
        tail, cluster = [v.de_pp], [v.de_pp, finite]
    elif c.tense == "modal":
        finite = _MODALS[c.modal][1].split()[i]
        tail, cluster = [v.lemma], [v.lemma, finite]
    else:
        finite = v.forms[i]
        tail, cluster = [v.prefix] if v.prefix else [], [v.prefix + finite]
    # Mittelfeld: pronoun objects, (definite objects when negated), adverbial,
    # nominal objects, nicht, prepositional object, PP, bare objects such as
    # Deutsch/Klavier, predicate adjective.
    pron, definite, kein, prep, bare = [], [], [], [], []
    for role, np in _objects(c, v) if v else []:
        if role == "prep":
            prep.append(_prep_de(v.de_prep[0], np, v.de_prep[1]))
            continue
        de = render_np(np, role, neg=_kein(c, role, np))[1]
        if np.kind == "pron":
            pron.append(de)
        elif np.kind == "fixed":  # "hat mit Anna Klavier gespielt", "kein Deutsch"
            bare.append(("kein " if c.neg else "") + de)
        else:
            (kein if _kein(c, role, np) else definite).append(de)
    front = order == "main" and c.front and bool(c.adv)
    adv = [c.adv] if c.adv and not front else []
    middle = pron + (definite + adv if c.neg else adv + definite) + kein
    if c.neg and not kein and not bare:
        middle.append("nicht")
    middle += prep + ([render_pp(c.pp)[1]] if c.pp else []) + bare
    middle += [c.adj] if c.adj else []
    subj = render_np(c.subj, "nom")[1]
    if order == "sub":
        words = [subj, *middle, *cluster]
    elif order == "main":
        words = [c.adv if front else subj, finite]
        words += ([subj] if front else []) + middle + tail
    else:
        words = [finite, subj, *middle, *tail]
    return " ".join(words)


def _render_en(c: Clause, question: bool = False, front: bool = False) -> str:
    """English clause in the simple present, present perfect or with a modal;
    do-support for negation and questions."""
    person = _person(c.subj)
    third = person.startswith("3sg")
    v = VERBS.get(c.verb)
    do = "does" if third else "do"
    if v is None:
        aux, head = ("am" if person == "1sg" else "is" if third else "are"), []
    elif c.tense == "perf":
        aux, head = ("has" if third else "have"), [v.en_pp]
    elif c.modal == "wollen":
        aux = do if c.neg or question else ""
        head = [("wants" if third and not aux else "want"), "to", v.en]
    elif c.modal == "möchten":
        aux, head = "would", ["like", "to", v.en]
    elif c.modal:
        aux, head = _MODALS[c.modal][0], [v.en]
    elif c.neg or question:
        aux, head = do, [v.en]
    else:
        aux, head = "", [_en_3sg(v.en) if third else v.en]
    rest = head
    if v is not None:
        objs = {role: render_np(np, "acc")[0] for role, np in _objects(c, v)}
        if v.frame == "dt" and v.en_prep:  # explain the task to the child
            rest += [objs["acc"], "to", objs["dat"]]
        elif v.frame == "dt":  # give the child a book
            rest += [objs["dat"], objs["acc"]]
        elif objs:
            obj = " ".join(w for w in (v.en_prep, *objs.values()) if w)
            if v.en_particle and c.obj.kind == "pron":  # pick him up
                rest += [obj, v.en_particle]
            else:
                rest += [w for w in (v.en_particle, obj) if w]
        elif v.en_particle:
            rest.append(v.en_particle)
    if c.pp:
        rest.append(render_pp(c.pp)[0])
    if c.adj:
        rest.append(ADJECTIVES[c.adj][0])
    adv = ADVERBS[c.adv][0] if c.adv else ""
    subj = render_np(c.subj, "nom")[0]
    if question:
        words = [aux, subj, *rest]
    else:
        neg = (["cannot"] if aux == "can" else [aux, "not"]) if c.neg else [aux]
        words = ([adv] if front and adv else []) + [subj, *neg, *rest]
    if adv and not (front and not question):
        words.append(adv)
    return " ".join(w for w in words if w)


def render_clause(c: Clause, order: str = "main") -> tuple[str, str]:
    """Render one clause (no capitalisation or final punctuation).

    ``order``: "main" (verb second; fronted adverbial if ``c.front``),
    "inverted" (verb first, after a fronted subordinate clause), "question" or
    "sub" (verb last).
    """
    front = order == "main" and c.front
    return _render_en(c, order == "question", front), _render_de(c, order)


_EN_LINK = {
    "weil": "because",
    "wenn": "if",
    "dass": "that",
    "und": "and",
    "aber": "but",
}


def _finish(text: str, punct: str) -> str:
    return text[0].upper() + text[1:] + punct


def render_sentence(
    clauses: tuple[Clause, ...] | list[Clause],
    link: str = "",
    sub_first: bool = False,
    question: bool = False,
) -> tuple[str, str]:
    """Render a sentence of one clause, or two joined by ``link``.

    weil/wenn/dass: ``clauses`` is (main, subordinate); the subordinate clause
    is verb-final, and with ``sub_first`` it fills the Vorfeld, so the main
    clause starts with its finite verb.  und/aber join two main clauses.
    """
    if not link:
        en, de = render_clause(clauses[0], "question" if question else "main")
        return _finish(en, "?" if question else "."), _finish(
            de, "?" if question else "."
        )
    first, second = clauses
    en_link = _EN_LINK[link]
    if link in ("und", "aber"):
        (en1, de1), (en2, de2) = render_clause(first), render_clause(second)
        sep = ", " if link == "aber" else " "
        return _finish(f"{en1}{sep}{en_link} {en2}", "."), _finish(
            f"{de1}{sep}{link} {de2}", "."
        )
    en_sub, de_sub = render_clause(second, "sub")
    if sub_first:
        en_main, de_main = render_clause(first, "inverted")
        return _finish(f"{en_link} {en_sub}, {en_main}", "."), _finish(
            f"{link} {de_sub}, {de_main}", "."
        )
    en_main, de_main = render_clause(first)
    en_sep = " " if link in ("dass", "wenn") else ", "
    return _finish(f"{en_main}{en_sep}{en_link} {en_sub}", "."), _finish(
        f"{de_main}, {link} {de_sub}", "."
    )


# --------------------------------------------------------------------------
# Held-out combinations.
# --------------------------------------------------------------------------

HELD_OUT_PERCENT = 10


def _head(np: NP | None) -> str:
    if np is None:
        return "Hause"
    return _PRONOUNS[np.head][3] if np.kind == "pron" else np.head


def clause_key(c: Clause) -> str | None:
    """Combination key of a clause: "verb>complement" (object, else PP head),
    or "adjective>subject" for the copula; None if there is no complement."""
    if c.verb == "sein":
        return f"{c.adj}>{_head(c.subj)}"
    v = VERBS[c.verb]
    if v.frame == "s":
        return None
    if c.obj2 or c.obj:
        return f"{v.lemma}>{_head(c.obj2 or c.obj)}"
    return f"{v.lemma}>{_head(c.pp.np)}" if c.pp else None


def is_held_out(key: str, seed: int) -> bool:
    """Whether a combination key is reserved for valid/test under ``seed``."""
    return zlib.crc32(f"{seed}|{key}".encode()) % 100 < HELD_OUT_PERCENT


# --------------------------------------------------------------------------
# Random sampling of clause specifications.
# --------------------------------------------------------------------------

CONSTRUCTIONS = (
    "present",
    "fronted",
    "perfect",
    "modal",
    "negation",
    "question",
    "copula",
    "weil",
    "dass",
    "wenn",
    "coordination",
)


class Example(NamedTuple):
    english: str
    german: str
    construction: str
    keys: tuple[str, ...]  # combination keys of all clauses


def _tagged(tags: frozenset[str]) -> list[str]:
    return [k for k, n in NOUNS.items() if n.tags & tags]


_HUMANS = _tagged(frozenset({"human"}))
_ANIMALS = _tagged(frozenset({"animal"}))
_ADJ_FOR = {
    k: [a for a, (_, _, t) in ADJECTIVES.items() if t & n.tags]
    for k, n in NOUNS.items()
}
_ADJ_HUMAN = _ADJ_FOR["Mann"]
_COPULA_SUBJECTS = [k for k in NOUNS if _ADJ_FOR[k]]
_SUBJ_PRONOUNS = [p for p in _PRONOUNS if p != "3sg.n"]
_POSSESSORS = ("1sg", "2sg", "3sg.m", "3sg.f", "1pl", "3pl")
_CLAUSE_VERBS = [k for k, v in VERBS.items() if v.frame not in ("w", "s")]
_MATRIX = [k for k, v in VERBS.items() if v.frame == "s"]
_PLACE_ROLE = {
    kind: [p for p, row in PLACES.items() if row[i] != "-"]
    for kind, i in (("loc", 0), ("dir", 2), ("src", 3), ("path", 4))
}
_SHOPS = [k for k, n in NOUNS.items() if "shop" in n.tags]
_NAME_LIST, _CITY_LIST = list(NAMES), list(CITIES)
# Adverbials by (perfect, negated, copula); states hold "today", not "every
# Monday", and "nicht jeden Tag" would change the meaning.
_ADVERBS_FOR = {
    (perf, neg, cop): [
        a
        for a, (_, p, n) in ADVERBS.items()
        if (p or not perf) and (n or not neg) and (not cop or a in ("heute", "jetzt"))
    ]
    for perf in (False, True)
    for neg in (False, True)
    for cop in (False, True)
}
# Semantic limits for a few verbs' location phrases.
_LOC_ONLY = {
    "schwimmen": ["See", "Fluss", "Schwimmbad"],
    "ankommen": ["Bahnhof", "Flughafen", "Hotel", "Schule"],
    "abfahren": ["Bahnhof", "Flughafen"],
}
# Verbs that are incomplete without their phrase ("wohnen" needs a place).
_PP_REQUIRED = {"wohnen", "gehen", "fliegen", "reisen", "sitzen", "stehen"}
# Stative verbs sound odd with modals ("darf ... mögen").
_NO_MODAL = {"mögen", "kennen", "lieben", "haben"}
_SUBJECT_HUMANS = [k for k in _HUMANS if k != "Baby"]
_GAMES = frozenset({"game"})


class _Sampler:
    """Draws random clause specifications; all randomness comes from ``rng``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.objects: dict[frozenset[str], list[tuple[str, str]]] = {}

    def _candidates(self, tags: frozenset[str]) -> list[tuple[str, str]]:
        if tags not in self.objects:
            cands = [("noun", k) for k in _tagged(tags)]
            cands += [("fixed", k) for k, (_, t) in FIXED.items() if t in tags]
            self.objects[tags] = cands
        return self.objects[tags]

    def noun(self, key: str, adj_p: float = 0.3, owner: NP | None = None) -> NP:
        """A noun phrase with a random determiner, number and adjective."""
        r, n = self.rng.random(), NOUNS[key]
        plural, num, poss = False, 0, ("", "")
        if n.mass:
            det = "def" if r < 0.35 else "indef"
        elif self.rng.random() < 0.3:
            plural = True
            det = ("def", "indef", "num", "poss")[bisect((0.45, 0.7, 0.9), r)]
        else:
            det = ("def", "indef", "poss")[bisect((0.53, 0.82), r)]
            if det == "indef" and self.rng.random() < 0.02:
                det, num = "num", 1
        if det == "num" and plural:
            num = self.rng.randint(2, 20)
        if det == "poss":
            # "you all ... your" must be euer, so it is always coreferent.
            own = owner is not None and (owner.head == "2pl" or self.rng.random() < 0.5)
            poss = _possessor(owner) if own else None
            if poss is None:
                p = _PRONOUNS[self.rng.choice(_POSSESSORS)]
                poss = (p[2], p[6])
        adj = ""
        if _ADJ_FOR[key] and self.rng.random() < adj_p:
            adj = self.rng.choice(_ADJ_FOR[key])
        return NP("noun", key, det, plural, adj, num, poss)

    def person(self, subj: NP | None, animals: bool = False) -> NP:
        """A human (or animal) NP; pronouns and names differ from ``subj``."""
        r = self.rng.random()
        if r < 0.18:
            code = self.rng.choice(_SUBJ_PRONOUNS)
            if subj is None or code != _person(subj):
                return NP("pron", code)
        if r < 0.4:
            name = self.rng.choice(_NAME_LIST)
            if subj is None or name != subj.head:
                return NP("name", name)
        pool = _ANIMALS if animals and self.rng.random() < 0.3 else _HUMANS
        if subj is None:  # babies do not write letters
            pool = _SUBJECT_HUMANS if pool is _HUMANS else pool
        key = self.rng.choice(pool)
        while subj is not None and key == subj.head:
            key = self.rng.choice(pool)
        return self.noun(key, owner=subj)

    def subject(self, kind: str) -> NP:
        if kind == "x":
            return self.noun(self.rng.choice(_ANIMALS), adj_p=0.25)
        return self.person(None, animals=kind == "a")

    def object(self, tags: frozenset[str], subj: NP) -> NP:
        if "human" in tags and self.rng.random() < 0.5:
            return self.person(subj, animals="animal" in tags)
        if "city" in tags and self.rng.random() < 0.3:
            return NP("city", self.rng.choice(_CITY_LIST))
        kind, key = self.rng.choice(self._candidates(tags))
        while key == subj.head:  # no "der Mann sieht den Mann"
            kind, key = self.rng.choice(self._candidates(tags))
        return NP("fixed", key) if kind == "fixed" else self.noun(key, owner=subj)

    def place(self, keys: list[str], subj: NP) -> NP:
        r = self.rng.random()
        det = "def" if r < 0.75 else "indef" if r < 0.9 else "poss"
        poss = (_possessor(subj) or ("my", "mein")) if det == "poss" else ("", "")
        adj = ""
        key = self.rng.choice(keys)
        if self.rng.random() < 0.2 and _ADJ_FOR[key]:
            adj = self.rng.choice(_ADJ_FOR[key])
        return NP("noun", key, det, False, adj, 0, poss)

    def pp(self, kind: str, v: Verb, subj: NP) -> PP:
        r, rng = self.rng.random(), self.rng
        if kind in _PERSON_PREP:
            # Animals go for walks and play, but do not learn German.
            pets = kind in ("com", "ohne") and (v.frame == "m" or v.subj != "h")
            return PP(kind, self.person(subj, animals=pets))
        free = kind != "path" and v.key not in _LOC_ONLY
        if kind in ("city", "dircity") or (free and 0.8 < r < 0.92):
            return PP(kind, NP("city", rng.choice(_CITY_LIST)))
        if free and r >= 0.92:
            return PP(kind, None)
        if kind == "res":
            return PP(kind, self.place(_tagged(frozenset({"home"})), subj))
        if v.key in _LOC_ONLY:
            return PP(kind, self.place(_LOC_ONLY[v.key], subj))
        if kind in ("dir", "src") and r < 0.1 and subj.head not in _SHOPS:
            return PP(kind, NP("noun", rng.choice(_SHOPS)))
        return PP(kind, self.place(_PLACE_ROLE[kind], subj))

    def adverb(self, tense: str, neg: bool) -> str:
        return self.rng.choice(_ADVERBS_FOR[tense == "perf", neg, tense == "copula"])

    def clause(
        self, tense: str, neg: bool = False, adv_p: float = 0.25, front: bool = False
    ) -> Clause:
        """A random clause with a full-verb."""
        rng = self.rng
        while True:
            v = VERBS[rng.choice(_CLAUSE_VERBS)]
            # "kein Deutsch" is idiomatic, "kein/nicht Fußball" varies: skip games.
            if neg and v.obj_tags == _GAMES:
                continue
            if not (tense == "modal" and v.key in _NO_MODAL):
                break
        subj = self.subject(v.subj)
        obj = obj2 = None
        if v.frame == "dt":
            obj = self.person(subj)
            obj2 = self.object(v.obj2_tags, subj)
        elif v.frame in ("t", "d", "p"):
            obj = self.object(v.obj_tags, subj)
        if neg:  # keep negation natural: no "nicht drei", no "keinem"
            obj = _definite(obj, keep_indef=v.frame == "t")
            obj2 = _definite(obj2, keep_indef=True)
        pp = None
        pp_p = 1.0 if v.key in _PP_REQUIRED else 0.85 if v.frame == "m" else 0.4
        if v.pp_kinds and rng.random() < pp_p:
            pp = self.pp(rng.choice(v.pp_kinds), v, subj)
        adv = self.adverb(tense, neg) if front or rng.random() < adv_p else ""
        modal = ""
        if tense == "modal":
            modal = rng.choice([m for m in _MODALS if not (neg and m == "müssen")])
        return Clause(subj, v.key, obj, obj2, pp, tense, modal, neg, adv, front)

    def copula(self, neg: bool = False, adv_p: float = 0.2) -> Clause:
        """Subject + sein + predicate adjective (uninflected in German)."""
        if self.rng.random() < 0.3:
            subj = replace(self.person(None), adj="")
        else:
            subj = self.noun(self.rng.choice(_COPULA_SUBJECTS), adj_p=0.0)
        adjs = _ADJ_FOR[subj.head] if subj.kind == "noun" else _ADJ_HUMAN
        adv = self.adverb("copula", neg) if self.rng.random() < adv_p else ""
        return Clause(subj, "sein", neg=neg, adv=adv, adj=self.rng.choice(adjs))

    def weather(self, tense: str) -> Clause:
        verb = self.rng.choice(["regnen", "schneien"])
        return Clause(NP("pron", "3sg.n"), verb, tense=tense)

    def tense(self) -> str:
        r = self.rng.random()
        return "pres" if r < 0.55 else "perf" if r < 0.8 else "modal"

    def sub_clause(self, weather_p: float = 0.15) -> Clause:
        r = self.rng.random()
        if r < weather_p:
            return self.weather("pres" if self.rng.random() < 0.7 else "perf")
        if r < weather_p + 0.12:
            return self.copula(neg=self.rng.random() < 0.15, adv_p=0.0)
        return self.clause(self.tense(), neg=self.rng.random() < 0.15, adv_p=0.1)

    def example(self) -> Example:
        """One random sentence pair of a uniformly chosen construction."""
        rng = self.rng
        kind = rng.choice(CONSTRUCTIONS)
        link, sub_first, question = "", False, False
        if kind == "present":
            clauses = [self.clause("pres", adv_p=0.3)]
        elif kind == "fronted":
            t = "pres" if rng.random() < 0.75 else rng.choice(["perf", "modal"])
            clauses = [self.clause(t, front=True)]
        elif kind == "perfect":
            clauses = [self.clause("perf", adv_p=0.3, front=rng.random() < 0.15)]
        elif kind == "modal":
            clauses = [self.clause("modal", adv_p=0.2, front=rng.random() < 0.1)]
        elif kind == "negation":
            clauses = [
                self.copula(neg=True)
                if rng.random() < 0.15
                else self.clause(self.tense(), neg=True)
            ]
        elif kind == "question":
            question = True
            clauses = [
                self.copula()
                if rng.random() < 0.15
                else self.clause(self.tense(), adv_p=0.15)
            ]
        elif kind == "copula":
            clauses = [self.copula(neg=rng.random() < 0.2)]
        elif kind == "weil":
            link, sub_first = "weil", rng.random() < 0.25
            clauses = [self.clause(self.tense(), adv_p=0.1), self.sub_clause()]
        elif kind == "dass":
            link = "dass"
            matrix = Clause(
                self.person(None),
                rng.choice(_MATRIX),
                tense="perf" if rng.random() < 0.2 else "pres",
            )
            clauses = [matrix, self.sub_clause(weather_p=0.05)]
        elif kind == "wenn":
            link, sub_first = "wenn", rng.random() < 0.6
            t = "pres" if rng.random() < 0.75 else "modal"
            sub = self.weather("pres") if rng.random() < 0.35 else self.clause("pres")
            clauses = [self.clause(t, adv_p=0.0), sub]
        else:
            link = rng.choice(["und", "und", "aber"])
            clauses = [
                self.clause(self.tense(), adv_p=0.1),
                self.clause(self.tense(), adv_p=0.1),
            ]
        en, de = render_sentence(clauses, link, sub_first, question)
        keys = tuple(k for k in map(clause_key, clauses) if k)
        return Example(en, de, kind, keys)


def _possessor(np: NP | None) -> tuple[str, str] | None:
    """(English, German) possessive agreeing with ``np``: the girl -> her/sein."""
    if np is None or np.kind in ("city", "fixed"):
        return None
    if np.kind == "pron":
        p = _PRONOUNS[np.head]
        return p[2], p[6]
    if np.kind == "name":
        return ("his", "sein") if NAMES[np.head] == "m" else ("her", "ihr")
    n = NOUNS[np.head]
    if np.plural or np.num > 1:
        return "their", "ihr"
    if "human" in n.tags and n.en_gender == "n":
        return None  # "the child ... its mother" would be odd English
    return {"m": "his", "f": "her", "n": "its"}[n.en_gender], (
        "ihr" if n.gender == "f" else "sein"
    )


def _definite(np: NP | None, keep_indef: bool) -> NP | None:
    """Make a negated clause's object definite unless kein can express it."""
    if np is None or np.kind != "noun" or np.det == "def" or np.det == "poss":
        return np
    if keep_indef and np.det == "indef":
        return np
    return NP("noun", np.head, "def", np.plural, np.adj, 0, np.poss)


# --------------------------------------------------------------------------
# Corpus generation.
# --------------------------------------------------------------------------

_TOKEN = re.compile(r"[\w']+")
_MIN_WORDS, _MAX_WORDS = 4, 25
MAX_PAIRS = 2_000_000


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _check_sizes(num_train: int, num_valid: int, num_test: int) -> None:
    for name, value in (
        ("num_train", num_train),
        ("num_valid", num_valid),
        ("num_test", num_test),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an int, got {value!r}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if num_train == 0:
        raise ValueError("num_train must be positive, got 0")
    total = num_train + num_valid + num_test
    if total > MAX_PAIRS:
        raise ValueError(
            f"num_train + num_valid + num_test = {total} exceeds the {MAX_PAIRS} "
            "distinct pairs the built-in grammar generator supports"
        )


def generate_examples(
    num_train: int = 20000, num_valid: int = 500, num_test: int = 500, seed: int = 1234
) -> dict[str, list[Example]]:
    """Like :func:`generate_corpus` but returns :class:`Example` records that
    also carry the construction name and the clauses' combination keys."""
    _check_sizes(num_train, num_valid, num_test)
    sampler = _Sampler(random.Random(seed))
    # Give up when the grammar stops producing usable pairs (duplicates, or
    # evaluation pairs whose words the training split lacks).
    budget = 30 * (num_train + num_valid + num_test) + 20000
    seen: set[tuple[str, str]] = set()
    train: list[Example] = []
    held: list[Example] = []

    def draw() -> tuple[Example, bool] | None:
        nonlocal budget
        while budget > 0:
            budget -= 1
            ex = sampler.example()
            n_en, n_de = len(ex.english.split()), len(ex.german.split())
            if _MIN_WORDS <= n_en <= _MAX_WORDS and _MIN_WORDS <= n_de <= _MAX_WORDS:
                return ex, any(is_held_out(k, seed) for k in ex.keys)
        return None

    def fail(split: str, have: int, want: int) -> ValueError:
        return ValueError(
            f"the grammar could not produce {want} distinct {split} pairs (got "
            f"{have}) for num_train={num_train}, num_valid={num_valid}, "
            f"num_test={num_test}, seed={seed}"
        )

    while len(train) < num_train:
        drawn = draw()
        if drawn is None:
            raise fail("train", len(train), num_train)
        ex, held_out = drawn
        if held_out:
            if len(held) < 3 * (num_valid + num_test):
                held.append(ex)
        elif (ex.english, ex.german) not in seen:
            seen.add((ex.english, ex.german))
            train.append(ex)

    # Evaluation pairs must only use words that occur in training.
    vocab_en = {t for ex in train for t in _tokens(ex.english)}
    vocab_de = {t for ex in train for t in _tokens(ex.german)}
    valid: list[Example] = []
    test: list[Example] = []
    pending = iter(held)
    while len(valid) < num_valid or len(test) < num_test:
        ex = next(pending, None)
        if ex is None:
            drawn = draw()
            if drawn is None:
                split = "valid" if len(valid) < num_valid else "test"
                raise fail(
                    split,
                    len(valid if split == "valid" else test),
                    num_valid if split == "valid" else num_test,
                )
            if not drawn[1]:
                continue
            ex = drawn[0]
        pair = (ex.english, ex.german)
        if (
            pair in seen
            or not vocab_en.issuperset(_tokens(ex.english))
            or not vocab_de.issuperset(_tokens(ex.german))
        ):
            continue
        seen.add(pair)
        (valid if len(valid) < num_valid else test).append(ex)
    return {"train": train, "valid": valid, "test": test}


def generate_corpus(
    num_train: int = 20000, num_valid: int = 500, num_test: int = 500, seed: int = 1234
) -> dict[str, list[tuple[str, str]]]:
    """Generate the built-in English→German corpus.

    Returns ``{"train", "valid", "test"}`` lists of ``(english, german)`` pairs.
    The same arguments always give the same pairs.  Every valid/test pair
    contains a held-out verb–complement combination (see :func:`clause_key`,
    :func:`is_held_out`) that no training pair contains, while all of its words
    occur in the training split; no pair occurs in two splits.

    Raises:
        ValueError: a size is negative or not an int, ``num_train`` is 0, or
            the grammar cannot produce enough distinct pairs.
    """
    examples = generate_examples(num_train, num_valid, num_test, seed)
    return {
        split: [(ex.english, ex.german) for ex in items]
        for split, items in examples.items()
    }
