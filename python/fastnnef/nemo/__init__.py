"""Export NeMo ASR models to NNEF for tract (``fastnnef-nemo``, also ``t2n_export_nemo``).

``export_nemo_asr_model`` is the API, ``cli.main`` the command line. One artefact per
subnet, as torch_to_nnef_nemo writes them: ``preprocessor.nnef.tgz`` (waveform -> features),
``encoder.nnef.tgz``, then ``decoder.nnef.tgz`` (CTC log-probabilities) or
``decoder_joint.nnef.tgz`` (a transducer's prediction network and joint), plus
``model_config.json``. The module map:

==================  ===================================================================
``subnets.py``      which NeMo model types are supported, and each subnet's module, names,
                    example inputs and dynamic axes
``export.py``       ``export_nemo_asr_model``: a staged directory, each subnet exported and
                    checked in tract, renamed into place when all passed
``cli.py``          the command line (a ``.nemo`` file in, a directory out)
==================  ===================================================================
"""

from fastnnef.exceptions import T2NErrorImport

try:
    import nemo.collections.asr  # noqa: F401  (every module here builds on it)
except ImportError as err:
    raise T2NErrorImport(
        "fastnnef.nemo needs NeMo's ASR collection: pip install 'fastnnef[nemo]' "
        f"(importing nemo.collections.asr failed: {err})"
    ) from err

from fastnnef.nemo.export import NemoExportReport, export_nemo_asr_model  # noqa: E402

__all__ = ["NemoExportReport", "export_nemo_asr_model"]
