"""Export Hugging Face causal LMs with their KV cache for tract (``fastnnef-llm``).

``dump_llm`` is the API, ``cli.main`` the command line (also installed as
``t2n_export_llm_to_tract``, torch_to_nnef_llm's name). The module map:

==================  ===================================================================
``api.py``          ``dump_llm`` and its report: the export, step by step
``phases.py``       the LLM phases ``dump_llm`` and ``dump_multimodal`` share (dtypes, properties, export)
``cli.py``          the command line (flags from ``options.py`` and the registries)
``options.py``      the option choices, and ``LLMExportOptions``: the shared keywords, checked once
``hub.py``          ``-s`` model ids: the Hugging Face cache, or a download into it
``load.py``         finding, checking and loading a checkpoint
``architectures.py``  tested and refused ``model_type`` values, the cache layout of a config
``wrapper.py``      the traced module: flat cache in and out, positions and masks
``cache.py``        flat tensors <-> transformers' cache object
``moe.py``          mixture-of-experts blocks in a traceable (dense) form
``bundles.py``      sample tokens, PyTorch runs, the ``tests/`` bundles and modes.json
``verify.py``       bundles and greedy generation run in tract, compared with PyTorch
``progress.py``     phase lines and the weight-writing line, on a terminal only
==================  ===================================================================
"""

from fastnnef.exceptions import T2NErrorImport

try:
    import transformers  # noqa: F401  (every module here builds on it)
except ImportError as err:  # pragma: no cover - transformers is installed for the tests
    raise T2NErrorImport("fastnnef.llm needs transformers 5: pip install 'fastnnef[llm]'") from err

from fastnnef.llm.api import LLMExportReport, dump_llm  # noqa: E402

__all__ = ["LLMExportReport", "dump_llm"]
