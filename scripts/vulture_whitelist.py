# Names vulture (the dead-code check of scripts/test.sh, configured in pyproject.toml) sees
# no use of, and which are used nonetheless: the drop-in API (torch_to_nnef's names and
# signatures, kept for its users), protocols other libraries call, and names reached by
# string or by a metaclass. Vulture only parses this file. A name that is really dead is
# removed from the code, not added here.
# ruff: noqa

# --- drop-in API: torch_to_nnef's exception hierarchy -----------------------------------
FastNNEFError
T2NErrorMissUse
T2NErrorTestFailed
T2NErrorKhronosNNEFModuleLoad
T2NErrorKhronosInterpreterDiffValue
T2NErrorBitPacking
T2NErrorRuntime
T2NErrorFragmentFile
T2NErrorTorchUnableToTraceData
T2NErrorTorchOpTranslatedDifferently
T2NErrorTorchNotFoundDataNode
T2NErrorTorchNotFoundOp
T2NErrorTorchCheck
T2NErrorOnnxExport
T2NErrorTractOnnxToNNEF
T2NErrorIRDataConsistency

# --- drop-in API: enum members, attributes and methods of the reference's classes ------
FLOAT16  # llm/options.py DtypeStr
BFLOAT16
Q40_LEGACY  # nnef_io/tensor.py DatBinHeader's codes
RAW  # torch_graph/ir_naming.py VariableNamingScheme
original_inputs  # inference_target/base.py UnfoldModelInfo
original_outputs
_.restore_require_grad  # tensor/updater.py ModTensorUpdater
_.is_empty  # utils.py ReactiveNamedItemDict
COLORMAP  # console.py Console

# --- drop-in signatures: parameters a caller passes and this implementation ignores -----
name_to_tensor  # ModuleInfoExtractor.convert_to_nnef(g, node, name_to_tensor, null_ref, torch_graph, ...)
null_ref
torch_graph
tensor_contents  # torch.Tensor.__repr__'s keyword, in the tensor stand-ins' __repr__
inplace  # `inplace` arguments of aten/quantized schemas (the functional form is exported)
sorted_  # aten::topk's `sorted`
attention_mask  # a transformers layer forward's keyword
output_final_state  # the gated-delta-net recurrent kernel's signature (transformers')

# --- protocols of other libraries -------------------------------------------------------
_.is_initialized  # transformers DynamicLayer (llm/cache.py)
_.layer_class_to_replicate  # transformers DynamicCache
_.description  # argparse.ArgumentParser (multimodal/cli.py)
_.help  # argparse.Action
_._is_param  # OpaqueTensorRef as an nn.Parameter for torch (tensor/opaque.py)
__getattr__  # module-level __getattr__ (PEP 562), op/custom_extractors/__init__.py
Payload  # nnef/payload.py: the protocol every payload class implements (typing.Protocol)
_.log_message  # http.server.BaseHTTPRequestHandler (tests/llm/fake_hub.py)
_.do_HEAD

# --- reached by string or by a metaclass --------------------------------------------------
MOE_COMPRESSION  # compression_registry="fastnnef.llm.moe.MOE_COMPRESSION"
REGISTERED  # ModuleInfoExtractor subclasses: read by the registering metaclass
SelectiveScanExtractor  # op/custom_extractors/ssm.py: defining it registers it (the metaclass)

# --- tests and benches -------------------------------------------------------------------
Unregistered  # ModuleInfoExtractor subclasses: defining one registers it
GateExtractor
DoubledExtractor  # tests/fx_graph/test_front_end_auto.py
Emitting
Partial
Undeclared
pytest_addoption  # tests/conftest.py: pytest's hooks, called by name
pytest_configure
pytest_collection_modifyitems
_factory  # tests/cli/test_cli.py: named on the command line ("module:_factory")
minmax  # tests/test_extras.py: registered by @register
ref_kwargs
op_helper
_.backward  # torch.autograd.Function
_.qconfig  # torch.ao.quantization reads it
_.long_inv_freq  # a transformers rotary embedding's buffer, set by the test
_.pre_tokenizer  # tokenizers.Tokenizer
_.__wrapped_model__
output_bytes  # benches/bench_llm_vs_llamacpp.py: a dataclass field of the JSON report
