"""MoE artefacts in tract: the dense form (every expert for every token) against
``tract_moe_ffn`` (only the routed experts), for the same Mixtral-like checkpoint.

One random-weight checkpoint (8 experts, top-2, f32, about 250 MB) is saved once, exported
twice by ``dump_llm`` with ``no_verify`` (the dense form is what a target older than tract
0.23.9 gets: the export is pointed at 0.23.5 for it), and a third time with the linear
layers and routed experts as Q4_0 (``fastnnef.llm.moe.MOE_COMPRESSION``); the artefacts are run by the
linked tract, one after the other in this process: load time (optimized model), prefill
tokens/s (one prompt of ``--prompt`` tokens, empty cache) and decode tokens/s (``--decode``
single-token steps feeding the cache back). The dense and tract_moe_ffn artefacts must give
the same greedy tokens, so they did equal work (the Q4_0 one's agreement is reported).

    PYTHONPATH=python .venv/bin/python benches/bench_moe_ffn.py [--dir /tmp/bench-moe] [--cleanup]

``--smoke`` runs the same code on a 1-layer model with a short prompt, once, in a temporary
directory (what CI runs: tests/test_benches.py).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

Q4_0_FORM = "moe_ffn+q4_0"  # linear layers and routed experts as Q4_0
MIXTRAL = dict(
    num_hidden_layers=4, hidden_size=512, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=4,
    num_local_experts=8, num_experts_per_tok=2, vocab_size=8192, max_position_embeddings=4096,
    tie_word_embeddings=False, initializer_range=0.1,
)
# --smoke: the same shape of model, as small as it gets (tract_moe_ffn needs rows of 32).
SMOKE = dict(MIXTRAL, num_hidden_layers=1, hidden_size=64, intermediate_size=64, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256)


def build_checkpoint(directory: Path) -> Path:
    checkpoint = directory / "mixtral"
    if not (checkpoint / "config.json").is_file():
        import torch
        import transformers

        torch.manual_seed(0)
        transformers.MixtralForCausalLM(transformers.MixtralConfig(**MIXTRAL)).save_pretrained(checkpoint)
    return checkpoint


def export(checkpoint: Path, out: Path, form: str) -> Path:
    from fastnnef.inference_target import TractNNEF
    from fastnnef.llm import dump_llm
    from fastnnef.utils import SemanticVersion

    shutil.rmtree(out, ignore_errors=True)
    older = mock.patch.object(TractNNEF, "latest_version", classmethod(lambda cls: SemanticVersion.from_str("0.23.5")))
    q4_0 = dict(compression_method="min_max_q4_0_with_experts", compression_registry="fastnnef.llm.moe.MOE_COMPRESSION")
    with older if form == "dense" else nullcontext():
        report = dump_llm(out, local_dir=checkpoint, no_verify=True, **(q4_0 if form == Q4_0_FORM else {}))
    return report.model_path


class Session:
    """One loaded artefact and its cache layout."""

    def __init__(self, path: Path) -> None:
        from fastnnef.check import TractArtefact

        started = time.perf_counter()
        self.artefact = TractArtefact.load(path)
        self.load_s = time.perf_counter() - started
        heads, dim = MIXTRAL["num_key_value_heads"], MIXTRAL["hidden_size"] // MIXTRAL["num_attention_heads"]
        self.empty = [np.zeros((1, heads, 0, dim), np.float32)] * (2 * MIXTRAL["num_hidden_layers"])

    def step(self, ids: np.ndarray, cache: list[np.ndarray]) -> tuple[int, list[np.ndarray]]:
        logits, *cache = self.artefact.run([ids.astype(np.int64), *cache])
        return int(logits.reshape(-1, logits.shape[-1])[-1].argmax()), cache

    def prefill(self, prompt: np.ndarray) -> tuple[float, int, list[np.ndarray]]:
        started = time.perf_counter()
        token, cache = self.step(prompt, self.empty)
        return time.perf_counter() - started, token, cache

    def decode(self, token: int, cache: list[np.ndarray], steps: int) -> tuple[float, list[int]]:
        tokens = []
        started = time.perf_counter()
        for _ in range(steps):
            token, cache = self.step(np.array([[token]]), cache)
            tokens.append(token)
        return time.perf_counter() - started, tokens


def measure(path: Path, prompt: np.ndarray, steps: int, repeats: int) -> dict[str, Any]:
    session = Session(path)
    session.prefill(prompt[:, :8])  # warm-up
    prefill = [session.prefill(prompt) for _ in range(repeats)]
    _, first, cache = prefill[0]
    decode = [session.decode(first, cache, steps) for _ in range(repeats)]
    return {
        "load_s": session.load_s,
        "prefill_tok_s": prompt.shape[1] / min(p[0] for p in prefill),
        "decode_tok_s": steps / min(d[0] for d in decode),
        "tokens": [first, *decode[0][1]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/bench-moe-ffn"))
    parser.add_argument("--prompt", type=int, default=128, help="prefill length")
    parser.add_argument("--decode", type=int, default=32, help="decode steps")
    parser.add_argument("--repeats", type=int, default=3, help="best of")
    parser.add_argument("--cleanup", action="store_true", help="delete the checkpoint and artefacts afterwards")
    parser.add_argument("--smoke", action="store_true",
                        help="a 1-layer model, 8-token prompt, 4 steps, once, in a temp dir")
    args = parser.parse_args()
    if args.smoke:
        MIXTRAL.update(SMOKE)
        args.prompt, args.decode, args.repeats, args.cleanup = 8, 4, 1, True
        args.dir = Path(tempfile.mkdtemp(prefix="bench-moe-ffn-"))
    args.dir.mkdir(parents=True, exist_ok=True)
    checkpoint = build_checkpoint(args.dir)
    weights = sum(p.stat().st_size for p in checkpoint.glob("*.safetensors"))
    paths = {form: export(checkpoint, args.dir / form, form) for form in ("dense", "tract_moe_ffn", Q4_0_FORM)}
    prompt = np.random.default_rng(0).integers(3, MIXTRAL["vocab_size"], (1, args.prompt))
    rows = {form: measure(path, prompt, args.decode, args.repeats) for form, path in paths.items()}
    agreement = np.mean(np.equal(rows[Q4_0_FORM].pop("tokens"), rows["dense"]["tokens"]))
    print(f"Q4_0 greedy tokens equal to f32's: {agreement:.0%}")
    if rows["dense"]["tokens"] != rows["tract_moe_ffn"]["tokens"]:
        raise SystemExit(f"the artefacts disagree: {rows['dense']['tokens']} vs {rows['tract_moe_ffn']['tokens']}")
    print(f"Mixtral-like, {MIXTRAL['num_local_experts']} experts top-{MIXTRAL['num_experts_per_tok']}, "
          f"{MIXTRAL['num_hidden_layers']} layers, f32, {weights / 1e6:.0f} MB; prefill {args.prompt} tokens, "
          f"decode {args.decode} steps, best of {args.repeats}")
    print(f"{'form':<15} {'load s':>8} {'prefill tok/s':>14} {'decode tok/s':>13}")
    for form, row in rows.items():
        print(f"{form:<15} {row['load_s']:>8.2f} {row['prefill_tok_s']:>14.0f} {row['decode_tok_s']:>13.1f}")
    dense, moe = rows["dense"], rows["tract_moe_ffn"]
    print(f"tract_moe_ffn / dense: prefill {moe['prefill_tok_s'] / dense['prefill_tok_s']:.2f}x, "
          f"decode {moe['decode_tok_s'] / dense['decode_tok_s']:.2f}x")
    if args.cleanup:
        shutil.rmtree(args.dir)


if __name__ == "__main__":
    main()
