"""SmolVLM (``model_type`` ``smolvlm``: SmolVLM2 and later): Idefics3's model under another
name (the same SigLIP-style tower on square tiles, pixel-shuffle connector and Llama
decoder; the processor adds videos and frame timestamps). Its encoder and decoder are
Idefics3's (``idefics3.py``), unchanged: see that module for the artefacts' IO.
"""

from __future__ import annotations

from dataclasses import replace

from fastnnef.multimodal.idefics3 import FAMILY as IDEFICS3

FAMILY = replace(IDEFICS3, model_type="smolvlm", models="SmolVLM2 (Idefics3-shaped)")
