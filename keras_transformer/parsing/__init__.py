"""English constituency parsing with the translation model (the paper's Table 4).

A sentence's words are the source, its tree linearized into bracket and
part-of-speech tokens is the target (`linearize`), and an EVALB-equivalent
scorer (`evalb`) reports labeled bracketing F1. Trees are `tree.Tree`; the
treebank reader is `keras_transformer.data.treebank`.
"""
