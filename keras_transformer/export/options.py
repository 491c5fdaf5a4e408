"""The flags of `keras-transformer export`, declared and checked once.

`ExportOptions` holds them; `targets.export_run` runs the exporter of the
format they name. Light: the command line reads it at start-up.
"""

from __future__ import annotations

import dataclasses

from keras_transformer.utils.setting_fields import check_setting, setting

FORMATS = ("savedmodel", "ctranslate2", "preset", "onnx", "huggingface")
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
#: A MarianMT export's `max_position_embeddings`: transformers' default
#: `model_max_length` for Marian's tokenizer.
HF_MAX_POSITIONS = 512


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """Which target `export` writes, where, and the flags of one target.
    Refused before any run is read: a flag of another format, a weight type
    the format cannot hold."""

    out: str = setting(
        dataclasses.MISSING, "the directory to create (must not exist)", metavar="DIR"
    )
    format: str = setting(
        "savedmodel",
        "savedmodel (TensorFlow serving, search inside), ctranslate2 (weights for "
        "CTranslate2; the search settings are recorded in export.json), preset "
        "(keras-hub's layout, for TransformerSeq2SeqLM.from_preset and --preset) "
        "onnx (the encoder and a cached decoder step for onnxruntime: "
        "translate --onnx, serve --engine onnx) or huggingface (a MarianMT "
        "checkpoint: transformers' MarianMTModel and MarianTokenizer load it)",
        choices=FORMATS,
    )
    quantization: str | None = setting(
        None,
        "ctranslate2: its weight type; onnx: int8 (onnxruntime's int8 MatMuls, "
        "the fast int8 on a CPU); savedmodel: int8 (Keras's int8 projections "
        "and embeddings)",
        choices=QUANTIZATIONS,
        shown_default="float32",
    )
    max_positions: int | None = setting(
        None,
        "CTranslate2 and huggingface: rows of the sinusoidal position table, "
        "the longest source or output it can encode",
        minimum=1,
        shown_default=(
            f"{DEFAULT_MAX_POSITIONS} for ctranslate2, "
            f"{HF_MAX_POSITIONS} for huggingface"
        ),
    )

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            check_setting(field, getattr(self, field.name))
        if self.format == "ctranslate2":
            return
        if self.max_positions is not None and self.format != "huggingface":
            raise ValueError(
                "--max-positions applies to --format ctranslate2 and huggingface only."
            )
        if self.format == "huggingface" and self.quantization not in (None, "float32"):
            raise ValueError(
                "--quantization does not apply to --format huggingface (float32 "
                "weights; transformers and CTranslate2's converter quantize them)."
            )
        if self.format == "preset" and self.quantization not in (None, "float32"):
            raise ValueError(
                "--quantization applies to --format ctranslate2 (its weight "
                "types), onnx and savedmodel (int8); a preset export holds "
                "float32 weights and is quantized as it loads: translate, "
                "evaluate or serve --preset DIR --quantize int8."
            )
        if self.quantization not in (None, "float32", "int8"):
            raise ValueError(
                f"--quantization {self.quantization} is a CTranslate2 weight type; "
                f"a {self.format} export takes int8 or float32."
            )
