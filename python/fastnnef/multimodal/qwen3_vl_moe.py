"""Qwen3-VL-MoE (``qwen3_vl_moe``): Qwen3-VL (``qwen3_vl.py``: the same tower with its
DeepStack streams, the same decoder IO and in-graph positions) whose decoder's MLPs are
sparse mixture-of-experts blocks, exported as the LLM exporter exports them
(``llm/moe.py``: one ``tract_moe_ffn`` where the op expresses the router, else the exact
dense form).
"""

from __future__ import annotations

from dataclasses import replace

from fastnnef.multimodal.qwen3_vl import FAMILY as QWEN3_VL

FAMILY = replace(QWEN3_VL, model_type="qwen3_vl_moe", models="Qwen3-VL (MoE)")
