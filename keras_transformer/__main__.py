"""`python -m keras_transformer` is the `keras-transformer` command."""

import sys

from keras_transformer.cli import console

sys.exit(console())
