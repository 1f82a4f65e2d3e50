"""The keys of the shape config (YAML or JSON), as torch_to_nnef's remodeler spells them.

A config maps each subnet to its boundary plan::

    encoder:
      inputs:
        audio_signal: {original_shape: [B, 80, T], collapse_dims: [B]}
        length: {original_shape: [B], collapse_dims: [B],
                 bind_scalar_to_dim_size: audio_signal.T}
      outputs:
        encoded: {collapse_dims: [0]}
      renamed_symbols: {S: [T]}
      outputs_keep: [encoded]
      extensions: ["tract_assert S >= 1"]

These names are the only place the spelling lives: the parser (``axis_registry.py``) and
the writer (``save_config``) read them from here.
"""

from __future__ import annotations

# Keys of one subnet's mapping.
SHAPE_KEY_INPUTS = "inputs"
SHAPE_KEY_OUTPUTS = "outputs"
SHAPE_KEY_RENAMED = "renamed_symbols"
SHAPE_KEY_OUTPUTS_KEEP = "outputs_keep"
SHAPE_KEY_EXTENSIONS = "extensions"

# Keys of one input's mapping.
INPUT_FIELD_ORIGINAL_SHAPE = "original_shape"
INPUT_FIELD_COLLAPSE_DIMS = "collapse_dims"
INPUT_FIELD_BIND_SCALAR_TO_DIM_SIZE = "bind_scalar_to_dim_size"
INPUT_FIELD_EVAL_SYMBOLS = "eval_symbols"

# Key of one output's mapping.
OUTPUT_FIELD_COLLAPSE_DIMS = "collapse_dims"

__all__ = [
    "SHAPE_KEY_INPUTS",
    "SHAPE_KEY_OUTPUTS",
    "SHAPE_KEY_RENAMED",
    "SHAPE_KEY_OUTPUTS_KEEP",
    "INPUT_FIELD_ORIGINAL_SHAPE",
    "INPUT_FIELD_COLLAPSE_DIMS",
    "INPUT_FIELD_BIND_SCALAR_TO_DIM_SIZE",
    "INPUT_FIELD_EVAL_SYMBOLS",
    "SHAPE_KEY_EXTENSIONS",
    "OUTPUT_FIELD_COLLAPSE_DIMS",
]
