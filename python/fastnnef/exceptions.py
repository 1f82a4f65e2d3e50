"""fastnnef's exception hierarchy.

Names mirror torch_to_nnef's (``T2NError`` and its subclasses, with the same builtin
bases, so that ``except ValueError`` style callers keep working). ``FastNNEFError`` is the
root under its own name. Classes added by fastnnef are marked as such.

Example::

    try:
        export_model_to_nnef(model, x, "model.bin", TractNNEF.latest())
    except T2NErrorInvalidArgument as err:   # also a ValueError
        print(err)  # names the bad suffix and the accepted ones
"""

from __future__ import annotations


class T2NError(Exception):
    """Root of every error raised by fastnnef."""


FastNNEFError = T2NError


class T2NErrorImport(T2NError):
    """An optional module could not be imported."""


class T2NErrorInvalidArgument(T2NError, ValueError):
    """An argument has a wrong value or type; the message names it and the accepted values."""


class T2NErrorNotFoundFile(T2NError, ValueError):
    """A file the call needs does not exist."""


class T2NErrorMisuse(T2NError, ValueError):
    """The API was used in an order or combination it does not support."""


T2NErrorMissUse = T2NErrorMisuse  # the name in torch_to_nnef <= 0.20 (its own tests import it)


class T2NErrorTestFailed(T2NError, ValueError):
    """A self-check failed."""


class T2NErrorIoQuantity(T2NError, ValueError):
    """The number of input or output names differs from the traced graph's."""


class T2NErrorDataNodeValue(T2NError, ValueError):
    """A value in the traced graph is not what the op expects."""


class T2NErrorInconsistentTensor(T2NError, ValueError):
    """A tensor's metadata disagrees with its data."""


class T2NErrorConsistency(T2NError, ValueError):
    """An internal consistency check failed."""


class T2NErrorKhronosNNEFModuleLoad(T2NError, ValueError):
    """The strict-NNEF artefact could not be loaded."""


class T2NErrorKhronosInterpreterDiffValue(T2NError, ValueError):
    """The strict-NNEF artefact's outputs differ from PyTorch's."""


class T2NErrorDynamicShapeValue(T2NError, ValueError):
    """``dynamic_axes`` is malformed or names unknown inputs or axes."""


class T2NErrorBitPacking(T2NError, ValueError):
    """A tensor cannot be packed at the requested bit width."""


class T2NErrorRuntime(T2NError, RuntimeError):
    """A runtime failure not covered by a more specific class."""


class T2NErrorNotImplemented(T2NError, NotImplementedError):
    """The feature is not supported (yet); the message says what is."""


class T2NErrorImpossibleQuantization(T2NError, NotImplementedError):
    """The tensor cannot be quantized with the requested scheme (shape, dtype)."""


class T2NErrorFragmentFile(T2NError, KeyError):
    """An NNEF fragment is unknown."""


class T2NErrorMissingOpEmitter(T2NErrorNotImplemented):
    """No handler exists for an aten op; the message names the op and the module path."""


class T2NErrorStrictNNEFSpec(T2NError):
    """An op has no form in the strict Khronos NNEF spec."""


class T2NErrorIR(T2NError):
    """The intermediate graph could not be built."""


class T2NErrorTorchGraphExtraction(T2NError):
    """The PyTorch graph could not be extracted."""


class T2NErrorTorchJitTraceFailed(T2NErrorTorchGraphExtraction, RuntimeError):
    """``torch.jit.trace`` failed on the model; the message carries torch's error."""


class T2NErrorTorchExportFailed(T2NErrorTorchGraphExtraction, RuntimeError):
    """``torch.export`` could not capture the model, or its program holds what the
    ``torch.export`` front end cannot lower (``fx_graph/``); the message says which."""


class T2NErrorTorchUnableToTraceData(T2NErrorTorchGraphExtraction, ValueError):
    """A value in the model cannot be traced."""


class T2NErrorTorchOpTranslatedDifferently(T2NErrorTorchGraphExtraction, ValueError):
    """An op was translated in a way that does not match its traced behaviour."""


class T2NErrorTorchNotFoundDataNode(T2NErrorTorchGraphExtraction, ValueError):
    """A value referenced by the traced graph was not found."""


class T2NErrorTorchNotFoundOp(T2NErrorTorchGraphExtraction, ValueError):
    """An op referenced by the traced graph was not found."""


class T2NErrorTorchCheck(T2NErrorTorchGraphExtraction, ValueError):
    """A check on the traced graph failed."""


class T2NErrorNotFoundModuleExtractor(T2NErrorTorchGraphExtraction, KeyError):
    """No module extractor is registered for a module class."""


class T2NErrorTract(T2NError):
    """tract failed to load, optimize or run an artefact; the message has tract's error chain."""


class T2NErrorTractDownload(T2NErrorTract):
    """Kept for API compatibility: fastnnef never downloads tract."""


class T2NErrorOnnxExport(T2NErrorTract, RuntimeError):
    """Kept for API compatibility."""


class T2NErrorTractOnnxToNNEF(T2NErrorTract, RuntimeError):
    """Kept for API compatibility."""


class T2NErrorIOPytorchTractNotISO(T2NErrorTract, ValueError):
    """tract's outputs differ from PyTorch's beyond the tolerance; the message has the report."""


class T2NErrorIRDataConsistency(Exception):
    """Kept outside the hierarchy, as in torch_to_nnef."""


# --- fastnnef additions -------------------------------------------------------------


class T2NErrorTensorTooLarge(T2NErrorInvalidArgument):
    """(fastnnef) A tensor exceeds the ``.dat`` limits (4 GiB payload, rank 8)."""


class T2NErrorDtypeOverflow(T2NErrorInvalidArgument):
    """(fastnnef) A value does not fit the requested dtype (e.g. bf16 -> f16 above 65504)."""


class T2NErrorCheckpoint(T2NErrorInvalidArgument):
    """(fastnnef) A checkpoint is malformed or truncated (the message names the file and the
    tensor), or does not match the model (missing, extra, wrong shape or dtype)."""


class T2NErrorArtefactIO(T2NError, OSError):
    """(fastnnef) Writing or reading an artefact failed at the OS level."""


class T2NErrorDatFormat(T2NError, ValueError):
    """(fastnnef) A ``.dat`` file is malformed."""
