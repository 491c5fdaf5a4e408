"""The parsing task's format library (the paper's Table 4): trees and their tokens.

A sentence's words are the source, its tree linearized into bracket and
part-of-speech tokens is the target (`linearize`), and an EVALB-equivalent
scorer (`evalb`) reports labeled bracketing F1. Trees are `tree.Tree`.
Nothing here imports the rest of the package: the tasks a run learns and
the parsing tokenizer (`data.tasks`), the treebank reader (`data.treebank`), parsing
with a search and scoring it (`decoding.parse_evaluation`) and the parsing
search's defaults (`decoding.settings.task_search`) stand above it.
"""
