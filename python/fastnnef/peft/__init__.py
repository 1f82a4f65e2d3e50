"""PEFT adapters (LoRA, ...) as NNEF tensors: ``fastnnef-peft``, alias ``t2n_export_peft_to_nnef``.

A ``.peft.nnef.tgz`` holds an adapter's matrices as ``.dat`` tensors and
``peft_mapping.json`` (method + base weight -> adapter tensors), torch_to_nnef_llm's layout:
one base artefact (``export_model_to_nnef``) serves many adapters, applied when the base is
loaded. The module map:

==============  =====================================================================
``mapping.py``  the patterns, the name templates and the ``peft_mapping.json`` table
``export.py``   ``export_peft``: checks, then the archive streamed by the Rust writer
``apply.py``    reading an archive back; a base artefact with LoRA merged, for tract
``cli.py``      the command line (the reference's flags)
==============  =====================================================================
"""

from fastnnef.peft.apply import PeftArchive, lora_merged_artefact, read_peft_archive
from fastnnef.peft.export import PeftExportReport, export_peft

__all__ = ["PeftArchive", "PeftExportReport", "export_peft", "lora_merged_artefact", "read_peft_archive"]
