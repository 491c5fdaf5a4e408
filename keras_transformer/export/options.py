"""The export flags' choices and defaults (light: read at start-up)."""

#: Weight types `quantization` accepts (CTranslate2's names); None keeps float32.
QUANTIZATIONS = (
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)
#: Rows of the positional table: CTranslate2's default `max_input_length` plus
#: room for the target side's extra length.
DEFAULT_MAX_POSITIONS = 1024 + 256
