"""Export Hugging Face vision-language (and audio-language) models for tract
(``fastnnef-multimodal``): a decoder artefact taking modality embeddings, one encoder
artefact per modality, and ``multimodal.json`` tying them, in torch_to_nnef_llm's layout.

``dump_multimodal`` is the API, ``cli.main`` the command line (also installed as
``t2n_export_multimodal_to_tract``). The module map:

==================  ===================================================================
``api.py``          ``dump_multimodal`` and its report: the export, step by step
``cli.py``          the command line (the LLM command line's flags)
``families.py``     the table of handled ``model_type`` values; the refusal of others
``family.py``       what a family defines: encoder specs, the decoder's extra inputs
``qwen2_5_vl.py``   Qwen2.5-VL: vision tower at any size, mrope positions in the graph
``qwen3_vl.py``     Qwen3-VL: as Qwen2.5-VL, plus the DeepStack streams
``qwen3_vl_moe.py`` Qwen3-VL-MoE: Qwen3-VL's family, MoE decoder blocks
``qwen3_5.py``      Qwen3.5(-MoE): Qwen3-VL's tower, a gated-delta-net hybrid decoder
``idefics3.py``     Idefics3: tiles through the tower and the pixel-shuffle connector
``smolvlm.py``      SmolVLM2: Idefics3's family under its own ``model_type``
``mistral3.py``     Mistral3: the Pixtral tower at any size, the patch merger
``gemma3.py``       Gemma3: fixed-size SigLIP tower, image tokens attending both ways
``qwen2_audio.py``  Qwen2-Audio: Whisper-style tower on a padded window, its mask
``voxtral.py``      Voxtral: Whisper-style tower on chunks, stacked frames; its sample
                    prompt without mistral_common
``splice.py``       embeddings placed at the placeholder tokens, in the traced graph
``encoder.py``      one encoder artefact: trace, bundle, check against Hugging Face
``heap.py``         glibc's mmap threshold fixed, so that tracing a deep tower does not
                    grow the C heap block by block
``decoder.py``      the decoder (``llm.wrapper.KVCacheLM`` + extra inputs): bundles,
                    generation from the image prompt in tract
``manifest.py``     ``multimodal.json`` and the embedding contracts
``samples.py``      the sample images and audio clips (made here, never downloaded)
==================  ===================================================================
"""

from fastnnef.exceptions import T2NErrorImport

try:
    import transformers  # noqa: F401  (every module here builds on it)
except ImportError as err:  # pragma: no cover - transformers is installed for the tests
    raise T2NErrorImport("fastnnef.multimodal needs transformers 5: pip install 'fastnnef[multimodal]'") from err

from fastnnef.multimodal.api import MultimodalExportReport, dump_multimodal  # noqa: E402

__all__ = ["MultimodalExportReport", "dump_multimodal"]
