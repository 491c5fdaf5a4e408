"""Data: corpora, tokenizers and the input pipeline (TensorFlow allowed here)."""
