"""State-space artefacts in tract: prefill and decode speed of a Mamba2-class, an
LFM2-class and a Mamba-class model against a llama of the same width and depth.

Random-weight checkpoints of one width (``--hidden``) and depth (``--layers``) are built
under ``--workdir``: llama (attention), mamba2 (Mamba2 layers only: one tract_core_scan per
layer), lfm2 (gated short convolutions with one attention layer in four), mamba (Mamba
layers). Each is exported by ``dump_llm`` (f32, ``no_verify``: the families' correctness is
the tests'), then the artefacts are loaded in this process by the linked tract and timed
interleaved, best of ``--repeats`` (``bench_llm_artefact_speed.Session``): prefill tokens/s
(one ``--prompt``-token prompt, empty cache) and decode tokens/s (``--decode`` one-token
steps, each feeding the artefact's own output states and cache back, so that attention
decodes at a past of ``--prompt`` to ``--prompt + --decode`` tokens), from this process's
CPU time (tract runs on the calling thread; wall time in brackets). The ratio columns are
each family's speed over llama's (above 1: faster than attention at the same width).

    PYTHONPATH=python .venv/bin/python benches/bench_llm_state_space_speed.py

``--smoke`` runs 1-layer models of width 64, a short prompt, once, in a temporary directory
removed afterwards (CI runs it, tests/test_benches.py).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from bench_llm_artefact_speed import ARTEFACT, Timings, measure

VOCAB = 8192


def configs(hidden: int, layers: int) -> dict[str, Any]:
    """The families at one width and depth (transformers config objects)."""
    import transformers

    heads = max(hidden // 64, 1)
    common = dict(num_hidden_layers=layers, hidden_size=hidden, vocab_size=VOCAB, tie_word_embeddings=False,
                  initializer_range=0.1)
    attention = dict(common, intermediate_size=hidden * 3, num_attention_heads=heads,
                     num_key_value_heads=max(heads // 4, 1), max_position_embeddings=4096)
    # Mamba2 with its usual proportions: heads of 64, expand 2, a state of 128, one group.
    mamba2 = dict(common, num_heads=2 * hidden // 64, head_dim=64, expand=2, state_size=128, n_groups=1,
                  conv_kernel=4, chunk_size=64)
    mamba = dict(common, state_size=16, expand=2, conv_kernel=4)
    lfm2_types = ["full_attention" if i % 4 == 3 else "conv" for i in range(layers)]
    return {
        "llama": transformers.LlamaConfig(**attention),
        "mamba2": transformers.Mamba2Config(**mamba2),
        "lfm2": transformers.Lfm2Config(**attention, layer_types=lfm2_types),
        "mamba": transformers.MambaConfig(**mamba),
    }


def build_and_export(workdir: Path, hidden: int, layers: int) -> dict[str, Path]:
    """Each family's checkpoint and its f32 artefact (built once per settings)."""
    import torch
    import transformers

    from fastnnef.llm import dump_llm

    paths = {}
    for family, config in configs(hidden, layers).items():
        checkpoint = workdir / f"{family}-{hidden}x{layers}"
        out = workdir / f"{family}-{hidden}x{layers}-export"
        if not (out / ARTEFACT).exists():
            torch.manual_seed(0)
            transformers.AutoModelForCausalLM.from_config(config).save_pretrained(checkpoint)
            shutil.rmtree(out, ignore_errors=True)
            dump_llm(out, local_dir=checkpoint, no_verify=True)
        paths[family] = out / ARTEFACT
    return paths


def parameters(hidden: int, layers: int) -> dict[str, int]:
    """Each family's parameter count (a model built on the meta device: no memory)."""
    import torch
    import transformers

    with torch.device("meta"):
        return {family: sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())
                for family, config in configs(hidden, layers).items()}


def rate(tokens: int, seconds: float) -> float:
    return tokens / seconds if seconds > 0 else float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fastnnef-state-space-speed"))
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="1 layer of width 64, a short prompt, once")
    args = parser.parse_args()
    if args.smoke:
        args.hidden, args.layers, args.prompt, args.decode, args.repeats = 64, 1, 8, 2, 1
    workdir = Path(tempfile.mkdtemp(prefix="ssm-speed-")) if args.smoke else args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        paths = build_and_export(workdir, args.hidden, args.layers)
        prompt = np.random.default_rng(0).integers(0, VOCAB, (1, args.prompt), dtype=np.int64)
        timings: dict[str, Timings] = measure(paths, prompt, args.decode, args.repeats)
    finally:
        if args.smoke:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"width {args.hidden}, {args.layers} layers, prompt {args.prompt}, {args.decode} decode steps, "
          f"best of {args.repeats}; tokens/s from CPU time (wall in brackets)")
    print("| family | prefill tok/s | decode tok/s | prefill / llama | decode / llama | parameters |")
    print("|---|---:|---:|---:|---:|---:|")
    base = timings["llama"]
    counts = parameters(args.hidden, args.layers)
    for family, t in timings.items():
        prefill = rate(args.prompt, t.best("prefill", "cpu"))
        decode = rate(args.decode, t.best("decode", "cpu"))
        prefill_wall = rate(args.prompt, t.best("prefill", "wall"))
        decode_wall = rate(args.decode, t.best("decode", "wall"))
        print(f"| {family} | {prefill:.1f} ({prefill_wall:.1f}) | {decode:.1f} ({decode_wall:.1f}) | "
              f"{prefill / rate(args.prompt, base.best('prefill', 'cpu')):.2f} | "
              f"{decode / rate(args.decode, base.best('decode', 'cpu')):.2f} | {counts[family] / 1e6:.1f} M |")


if __name__ == "__main__":
    main()
