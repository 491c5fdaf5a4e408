"""The task family: `TransformerSeq2SeqLM`, its preprocessor and its preset files."""
