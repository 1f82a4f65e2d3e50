"""Tiny NeMo ASR models built offline from their configs, with random weights (seeded).
Import it after ``pytest.importorskip("nemo.collections.asr")``."""

from __future__ import annotations

from typing import Any

import torch
from nemo.collections.asr.models import EncDecCTCModel, EncDecRNNTModel
from omegaconf import OmegaConf

SAMPLE_RATE = 16000
FEATURES = 32
D_MODEL = 32
LABELS = list(" abcdefghijklmnopqrstuvwxyz'")
PRED_HIDDEN = 16


def fastconformer_ctc_config(dither: float = 0.0, pad_to: int = 0) -> Any:
    """A two-layer FastConformer CTC (8x depthwise-striding subsampling, relative-position
    attention, batch-norm convolutions): the layout of NeMo's FastConformer CTC configs,
    shrunk."""
    return OmegaConf.create({
        "sample_rate": SAMPLE_RATE,
        "labels": LABELS,
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": SAMPLE_RATE, "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01,
            "window": "hann", "features": FEATURES, "n_fft": 512, "log": True, "frame_splicing": 1,
            "dither": dither, "pad_to": pad_to, "pad_value": 0.0,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": FEATURES, "feat_out": -1, "n_layers": 2, "d_model": D_MODEL,
            "subsampling": "dw_striding", "subsampling_factor": 8, "subsampling_conv_channels": 16,
            "causal_downsampling": False, "ff_expansion_factor": 2, "self_attention_model": "rel_pos",
            "n_heads": 4, "att_context_size": [-1, -1], "xscaling": True, "untie_biases": True,
            "pos_emb_max_len": 500, "conv_kernel_size": 9, "conv_norm_type": "batch_norm",
            "dropout": 0.0, "dropout_pre_encoder": 0.0, "dropout_emb": 0.0, "dropout_att": 0.0,
        },
        "decoder": {
            "_target_": "nemo.collections.asr.modules.ConvASRDecoder",
            "feat_in": D_MODEL, "num_classes": len(LABELS), "vocabulary": LABELS,
        },
        "train_ds": None, "validation_ds": None, "test_ds": None, "optim": None,
    })


def randomize_norms(model: torch.nn.Module) -> None:
    """Batch-norm statistics and norm affines away from their identity initial values, so
    that a graph that dropped them would not pass."""
    generator = torch.Generator().manual_seed(1)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            module.running_mean.copy_(torch.randn(module.running_mean.shape, generator=generator) * 0.1)
            module.running_var.copy_(torch.rand(module.running_var.shape, generator=generator) + 0.5)
        if isinstance(module, (torch.nn.BatchNorm1d, torch.nn.LayerNorm)) and module.weight is not None:
            module.weight.data.copy_(1 + torch.randn(module.weight.shape, generator=generator) * 0.1)
            module.bias.data.copy_(torch.randn(module.bias.shape, generator=generator) * 0.1)


def build_fastconformer_ctc(dither: float = 0.0, pad_to: int = 0) -> EncDecCTCModel:
    torch.manual_seed(0)
    model = EncDecCTCModel(cfg=fastconformer_ctc_config(dither, pad_to))
    with torch.no_grad():
        randomize_norms(model)
    return model.eval()



def fastconformer_rnnt_config() -> Any:
    """The same encoder with an RNNT prediction network (one LSTM layer) and joint."""
    cfg = fastconformer_ctc_config()
    cfg["model_defaults"] = {"enc_hidden": D_MODEL, "pred_hidden": PRED_HIDDEN, "joint_hidden": 16}
    cfg.decoder = OmegaConf.create({
        "_target_": "nemo.collections.asr.modules.RNNTDecoder", "normalization_mode": None,
        "random_state_sampling": False, "blank_as_pad": True, "vocab_size": len(LABELS),
        "prednet": {"pred_hidden": PRED_HIDDEN, "pred_rnn_layers": 1, "t_max": None, "dropout": 0.0},
    })
    cfg.joint = OmegaConf.create({
        "_target_": "nemo.collections.asr.modules.RNNTJoint", "log_softmax": None, "preserve_memory": False,
        "fuse_loss_wer": False, "fused_batch_size": 4, "num_classes": len(LABELS), "vocabulary": LABELS,
        "jointnet": {"joint_hidden": 16, "activation": "relu", "dropout": 0.0, "encoder_hidden": D_MODEL,
                     "pred_hidden": PRED_HIDDEN},
    })
    cfg["decoding"] = {"strategy": "greedy_batch", "greedy": {"max_symbols": 5}}
    cfg["loss"] = {"loss_name": "default"}
    return cfg


def build_fastconformer_rnnt() -> EncDecRNNTModel:
    torch.manual_seed(0)
    model = EncDecRNNTModel(cfg=fastconformer_rnnt_config())
    with torch.no_grad():
        randomize_norms(model)
    return model.eval()
