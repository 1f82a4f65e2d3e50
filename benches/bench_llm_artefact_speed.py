"""Artefact speed in tract: fastnnef-llm's artefact against torch_to_nnef_llm's
(t2n_export_llm_to_tract) for the same checkpoint, per family and weight form.

Random-weight checkpoints (llama ~100 M parameters; mixtral, qwen3-moe and gpt-oss with
8 experts, top-2, small dimensions; a local word-level tokenizer) are built once under
``--workdir``. Each is exported by both commands with ``-nv`` as f32, f16 (``-dt f16``) and
Q4_0 (``-c min_max_q4_0``), each command a fresh process. Then both artefacts of a row are
loaded in this process by the linked tract and timed, interleaved (ABBA), best of
``--repeats``: load (optimize and plan), prefill tokens/s (one ``--prompt``-token prompt,
empty cache) and decode tokens/s (``--decode`` one-token steps feeding the growing cache
back), from the CPU time of this process (tract runs on the calling thread; on a shared
machine wall time, printed in brackets, also counts the waits for a core). The ratio is
ours / the reference's speed (above 1: ours is faster). The greedy tokens of both are
compared and reported, and each artefact's last-token logits against PyTorch's in f32
(``from_pretrained``, eager attention) on ``--drift-prompts`` random prompts, in a child
process: the mean absolute difference and how often the argmax agrees. With random
weights an f16 artefact's greedy tokens part from the other side's after a few steps
(rounding flips a top-2 expert choice): that column says which side stays nearer PyTorch.
Parameters a fresh model holds at exactly 1 or 0 (norm weights, biases) get noise first:
the reference drops multiplications by ones.

torch_to_nnef_llm is not a dependency; install it apart (see bench_llm_vs_torch_to_nnef.py):
    PYTHONPATH=python .venv/bin/python benches/bench_llm_artefact_speed.py --reference /tmp/t2n-bench
``--reference-python`` runs the reference with another interpreter (e.g. a venv whose
transformers is 4.x). Without ``--reference`` the reference runs from the current
environment if it has torch_to_nnef_llm, and is skipped with a note otherwise (then only
our artefacts are timed). ``--smoke`` runs a 1-layer llama as f32 and mixtral as Q4_0,
a short prompt, once, in a temporary directory removed afterwards (CI runs it,
tests/test_benches.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from bench_llm_vs_torch_to_nnef import FASTNNEF_PYTHON, reference_missing, run, stub_tract

ROOT = FASTNNEF_PYTHON.parent
T = TypeVar("T")
ARTEFACT = Path("model") / "model.nnef.tgz"
# The weight forms of a row: the flags both commands get.
FORMS: dict[str, list[str]] = {"f32": [], "f16": ["-dt", "f16"], "q4_0": ["-c", "min_max_q4_0"]}
MOE = dict(num_experts_per_tok=2, max_position_embeddings=4096, tie_word_embeddings=False, initializer_range=0.1)
# family -> (transformers config class, model class, dimensions). Every width is a multiple
# of 32 (Q4_0 blocks); the vocabulary holds the test tokenizer's words.
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    # ~104 M parameters (417 MB of f32).
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(
        num_hidden_layers=6, hidden_size=1024, intermediate_size=2816, num_attention_heads=16, num_key_value_heads=4,
        vocab_size=16384, max_position_embeddings=4096, tie_word_embeddings=False,
    )),
    # ~59 M parameters each: 4 layers of 8 experts.
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(
        MOE, num_hidden_layers=4, hidden_size=512, intermediate_size=1024, num_attention_heads=8,
        num_key_value_heads=4, num_local_experts=8, vocab_size=8192,
    )),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        MOE, num_hidden_layers=4, hidden_size=512, moe_intermediate_size=1024, intermediate_size=1024,
        num_attention_heads=8, num_key_value_heads=4, head_dim=64, num_experts=8, vocab_size=8192,
    )),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", dict(
        MOE, num_hidden_layers=4, hidden_size=512, intermediate_size=1024, num_attention_heads=8,
        num_key_value_heads=4, head_dim=64, num_local_experts=8, vocab_size=8192, sliding_window=128,
        layer_types=["sliding_attention", "full_attention"] * 2,
    )),
}
# --smoke: the same shapes, as small as they get (tract_moe_ffn needs rows of 32).
SMOKE_DIMS = dict(num_hidden_layers=1, hidden_size=64, intermediate_size=64, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=256)
SMOKE_ROWS = [("llama", "f32"), ("mixtral", "q4_0")]


def build_checkpoints(directory: Path, families: list[str], smoke: bool) -> None:
    """``directory/<family>/<family>``: a checkpoint and its tokenizer, saved once (reused
    when present) by a separate process, so that this one does not hold the models. The
    reference wants ``-d`` to hold one subdirectory with config.json."""
    missing = [f for f in families if not (directory / f / f / "config.json").is_file()]
    if missing:
        smoke_flag = ["--smoke"] if smoke else []
        subprocess.run([sys.executable, __file__, "--build", str(directory), *smoke_flag, "--families", *missing],
                       check=True)


def _build(directory: Path, families: list[str], smoke: bool) -> None:
    import torch
    import transformers

    sys.path.insert(0, str(ROOT))
    from tests.llm.conftest import save_tokenizer

    for family in families:
        config_class, model_class, dims = FAMILIES[family]
        dims = {**dims, **SMOKE_DIMS, "num_hidden_layers": 1} if smoke else dims
        if "layer_types" in dims:
            dims["layer_types"] = dims["layer_types"][: dims["num_hidden_layers"]]
        if "head_dim" in dims and smoke:
            dims["head_dim"] = dims["hidden_size"] // dims["num_attention_heads"]
        if "moe_intermediate_size" in dims and smoke:
            dims["moe_intermediate_size"] = dims["intermediate_size"]
        torch.manual_seed(0)
        model = getattr(transformers, model_class)(getattr(transformers, config_class)(**dims))
        with torch.no_grad():  # like a trained model's: an exporter may drop a multiplication by ones
            for parameter in model.parameters():
                if bool((parameter == 1).all()) or bool((parameter == 0).all()):
                    parameter.add_(torch.randn_like(parameter) * 0.1)
        checkpoint = directory / family / family
        model.save_pretrained(checkpoint)
        save_tokenizer(checkpoint)
        # transformers 5 names its own tokenizer class, which a 4.x reference cannot load.
        tokenizer_config = checkpoint / "tokenizer_config.json"
        tokenizer_config.write_text(json.dumps({**json.loads(tokenizer_config.read_text()),
                                                "tokenizer_class": "PreTrainedTokenizerFast"}))
        print(f"built {family}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")


@dataclass
class Exporter:
    """One of the two commands and how to run it."""

    name: str
    python: str
    pythonpath: str

    def export(self, source: Path, out: Path, form: str, stub: Path) -> float:
        """Export ``source`` (``directory/<family>``) into ``out``; the wall seconds."""
        shutil.rmtree(out, ignore_errors=True)
        flags = ["-e", str(out), "-nv", *FORMS[form]]
        if self.name == "fastnnef":
            command = [self.python, "-m", "fastnnef.llm", "-d", str(source / source.name), *flags]
        else:
            command = [self.python, "-c", "from torch_to_nnef_llm.cli import main; main()", "-d", str(source),
                       *flags, "--tract-specific-path", str(stub)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": self.pythonpath}
        wall, _ = run(command, env)
        return wall


@dataclass(frozen=True)
class Seconds:
    """Wall and CPU seconds of one timed call (tract runs on the calling thread, so CPU
    time is the work itself: on a machine shared with other jobs, wall time also counts
    the waits for a core)."""

    wall: float
    cpu: float


def timed(call: Callable[[], T]) -> tuple[Seconds, T]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return Seconds(time.perf_counter() - wall, time.process_time() - cpu), result


class Session:
    """One loaded artefact: its inputs are the token ids then the caches (empty at
    prefill), its outputs the logits then the caches, in the same order."""

    def __init__(self, path: Path) -> None:
        from fastnnef.check import TractArtefact

        self.load, self.artefact = timed(lambda: TractArtefact.load(path))
        dtypes = {"f32": np.float32, "f16": np.float16, "i64": np.int64}
        (_, ids_fact), *cache_facts = self.artefact.input_facts
        if len(ids_fact) != 2:
            raise SystemExit(f"{path}: expected token ids [batch, tokens], got {ids_fact}")
        # A symbolic dim is the past length, 0 at prefill; the batch is 1.
        self.empty = [np.zeros([d if isinstance(d, int) else 0 for d in dims], dtypes[dtype])
                      for dtype, dims in cache_facts]

    def step(self, ids: np.ndarray, cache: list[np.ndarray]) -> tuple[int, list[np.ndarray]]:
        logits, *cache = self.artefact.run([ids.astype(np.int64), *cache])
        return int(logits.reshape(-1, logits.shape[-1])[-1].argmax()), cache

    def prefill(self, prompt: np.ndarray) -> tuple[Seconds, tuple[int, list[np.ndarray]]]:
        return timed(lambda: self.step(prompt, self.empty))

    def decode(self, token: int, cache: list[np.ndarray], steps: int) -> tuple[Seconds, list[int]]:
        def run() -> list[int]:
            nonlocal token, cache
            tokens = []
            for _ in range(steps):
                token, cache = self.step(np.array([[token]]), cache)
                tokens.append(token)
            return tokens

        return timed(run)


@dataclass
class Timings:
    """One side's best (smallest) seconds over the rounds, and its greedy tokens."""

    load: list[Seconds] = field(default_factory=list)
    prefill: list[Seconds] = field(default_factory=list)
    decode: list[Seconds] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def best(self, what: str, clock: str) -> float:
        return min(getattr(s, clock) for s in getattr(self, what))


def measure(paths: dict[str, Path], prompt: np.ndarray, steps: int, repeats: int) -> dict[str, Timings]:
    """Per side, every round's load, prefill and decode seconds, the sides interleaved in
    every round (in alternating order) so that both see the same load of the machine."""
    sessions: dict[str, Session] = {}
    timings = {side: Timings() for side in paths}
    for _ in range(repeats):
        for side, path in paths.items():
            sessions.pop(side, None)  # one copy of each artefact in memory at a time
            sessions[side] = Session(path)
            timings[side].load.append(sessions[side].load)
    for session in sessions.values():
        session.prefill(prompt[:, :8])  # warm-up
    for round_ in range(repeats):
        # ABBA: whichever runs first in a round was measured slower by up to 10 % here.
        for side, session in list(sessions.items())[:: 1 if round_ % 2 == 0 else -1]:
            seconds, (first, cache) = session.prefill(prompt)
            timings[side].prefill.append(seconds)
            seconds, generated = session.decode(first, cache, steps)
            timings[side].decode.append(seconds)
            timings[side].tokens = [first, *generated]
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path,
                        help="where torch_to_nnef_llm is installed (default: this environment)")
    parser.add_argument("--reference-python", default=sys.executable, help="the interpreter that runs the reference")
    parser.add_argument("--skip-reference", "--no-reference", action="store_true", help="time our artefacts only")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fastnnef-artefact-speed"))
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    parser.add_argument("--forms", nargs="+", choices=list(FORMS), default=list(FORMS))
    parser.add_argument("--prompt", type=int, default=128, help="prefill length")
    parser.add_argument("--decode", type=int, default=64, help="decode steps")
    parser.add_argument("--repeats", type=int, default=3, help="best of, interleaved")
    parser.add_argument("--reuse", action="store_true", help="time the artefacts a previous run left, if any")
    parser.add_argument("--drift-prompts", type=int, default=8,
                        help="prompts on which each artefact's logits are compared with PyTorch f32 (0: none)")
    parser.add_argument("--cleanup", action="store_true", help="delete the checkpoints and artefacts afterwards")
    parser.add_argument("--smoke", action="store_true", help="tiny llama f32 and mixtral Q4_0, in a temp dir")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)  # the checkpoint-building child
    parser.add_argument("--drift", nargs="+", help=argparse.SUPPRESS)  # the child comparing with PyTorch
    args = parser.parse_args()
    if args.build:
        _build(args.build, args.families, args.smoke)
        return
    if args.drift:
        checkpoint, vocab, *artefacts = args.drift
        drift_child(Path(checkpoint), int(vocab), [Path(a) for a in artefacts], args.drift_prompts, args.prompt)
        return
    if args.smoke:
        args.families, args.prompt, args.decode, args.repeats = [f for f, _ in SMOKE_ROWS], 8, 4, 1
        args.drift_prompts = min(args.drift_prompts, 1)
    reference: Exporter | None = None
    if not args.skip_reference:
        if args.reference is None and args.reference_python == sys.executable and (missing := reference_missing()):
            print(f"(reference skipped: no --reference, and torch_to_nnef_llm cannot be imported here: {missing})")
        else:
            reference = Exporter("reference", args.reference_python, str(args.reference or ""))
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="fastnnef-artefact-speed-") as tmp:
            compare(args, Path(tmp), reference)
    else:
        compare(args, args.workdir, reference)
        if args.cleanup:
            shutil.rmtree(args.workdir)


def compare(args: argparse.Namespace, workdir: Path, reference: Exporter | None) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    build_checkpoints(workdir / "checkpoints", args.families, args.smoke)
    from fastnnef._native import TRACT_VERSION

    stub = stub_tract(workdir, TRACT_VERSION)  # the linked tract: MoE blocks need >= 0.23.9 in the reference
    exporters = [Exporter("fastnnef", sys.executable, str(FASTNNEF_PYTHON)), *([reference] if reference else [])]
    print(f"prefill {args.prompt} tokens, decode {args.decode} steps, best of {args.repeats}, interleaved; "
          "tok/s from CPU time (wall in brackets); ratio: ours / the reference's speed (> 1: ours faster), "
          "[the median of the rounds' own CPU ratios]")
    lines = ["| family | form | side | export s | load s | prefill tok/s | decode tok/s | greedy tokens equal "
             "| logits vs PyTorch f32: mean abs diff, argmax equal |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    pairs = SMOKE_ROWS if args.smoke else [(family, form) for family in args.families for form in args.forms]
    for family, form in pairs:
        source = workdir / "checkpoints" / family
        vocab = SMOKE_DIMS["vocab_size"] if args.smoke else FAMILIES[family][2]["vocab_size"]
        prompt = np.random.default_rng(0).integers(3, vocab, (1, args.prompt))
        paths, export_s = {}, {}
        for exporter in exporters:
            out = workdir / "artefacts" / f"{family}-{form}-{exporter.name}"
            try:
                reused = args.reuse and (out / ARTEFACT).is_file()
                export_s[exporter.name] = float("nan") if reused else exporter.export(source, out, form, stub)
                paths[exporter.name] = out / ARTEFACT
            except SystemExit as failure:  # the reference cannot export every family
                print(f"{family} {form}: {exporter.name} export failed: {str(failure)[-600:]}")
        timings = measure(paths, prompt, args.decode, args.repeats)
        drift = logits_drift(source / family, vocab, paths, args.drift_prompts, args.prompt)
        rows = [row(family, form, side, export_s[side], t, args.prompt, args.decode, drift.get(side))
                for side, t in timings.items()]
        if len(timings) == 2:
            rows.append(ratio_row(family, form, export_s, timings))
        lines += rows
        print("\n".join(rows), flush=True)
    print("\n".join(lines))


def row(family: str, form: str, side: str, export_s: float, t: Timings, prompt: int, steps: int,
        drift: dict[str, float] | None) -> str:
    rates = [f"{n / t.best(what, 'cpu'):.1f} ({n / t.best(what, 'wall'):.1f})"
             for what, n in (("prefill", prompt), ("decode", steps))]
    near = f"{drift['mean_abs']:.4f}, {drift['argmax_equal']:.0f}/{drift['prompts']:.0f}" if drift else ""
    return (f"| {family} | {form} | {side} | {export_s:.2f} | {t.best('load', 'cpu'):.2f} | {rates[0]} | {rates[1]} "
            f"| | {near} |")


def paired(ours: Timings, ref: Timings, what: str) -> float:
    """The median over rounds of the reference's CPU seconds over ours in the same round."""
    return float(np.median([r.cpu / o.cpu for o, r in zip(getattr(ours, what), getattr(ref, what))]))


def ratio_row(family: str, form: str, export_s: dict[str, float], timings: dict[str, Timings]) -> str:
    """Ours / the reference's speed: the reference's seconds over ours, best of the rounds,
    then in square brackets the median of the rounds' own CPU ratios (both sides ran in the
    same round: on a shared machine the same artefact against itself moved by ±10 % best-of)."""
    ours, ref = timings["fastnnef"], timings["reference"]
    speed = [f"**{ref.best(what, 'cpu') / ours.best(what, 'cpu'):.2f}×** "
             f"({ref.best(what, 'wall') / ours.best(what, 'wall'):.2f}×) [{paired(ours, ref, what):.2f}×]"
             for what in ("prefill", "decode")]
    agree = np.mean(np.equal(ours.tokens, ref.tokens))
    return (f"| {family} | {form} | ratio | {export_s['reference'] / export_s['fastnnef']:.2f}× "
            f"| {ref.best('load', 'cpu') / ours.best('load', 'cpu'):.2f}× | {speed[0]} | {speed[1]} | {agree:.0%} | |")


def logits_drift(checkpoint: Path, vocab: int, paths: dict[str, Path], prompts: int,
                 length: int) -> dict[str, dict[str, float]]:
    """Per side, its last-token logits against PyTorch f32's (``drift_child``, a separate
    process: this one holds no model while it times)."""
    if prompts <= 0 or not paths:
        return {}
    out = subprocess.run([sys.executable, __file__, "--drift", str(checkpoint), str(vocab), *map(str, paths.values()),
                          "--drift-prompts", str(prompts), "--prompt", str(length)],
                         check=True, capture_output=True, text=True).stdout
    return dict(zip(paths, json.loads(out.strip().splitlines()[-1])))


def drift_child(checkpoint: Path, vocab: int, artefacts: list[Path], prompts: int, length: int) -> None:
    """Prints, as one JSON line, per artefact the mean absolute difference of its last-token
    logits from PyTorch f32's (``from_pretrained``, eager attention) over random prompts, and
    on how many of them both take the same argmax."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    sessions = [Session(path) for path in artefacts]
    diffs: list[list[float]] = [[] for _ in sessions]
    equal = [0 for _ in sessions]
    for k in range(prompts):
        ids = np.random.default_rng(1000 + k).integers(3, vocab, (1, length))
        with torch.no_grad():
            expected = model(torch.from_numpy(ids)).logits[0, -1].numpy()
        for i, session in enumerate(sessions):
            logits, *_ = session.artefact.run([ids.astype(np.int64), *session.empty])
            got = logits.reshape(-1, logits.shape[-1])[-1].astype(np.float32)
            diffs[i].append(float(np.abs(got - expected).mean()))
            equal[i] += int(got.argmax() == expected.argmax())
    print(json.dumps([{"mean_abs": float(np.mean(d)), "argmax_equal": e, "prompts": prompts}
                      for d, e in zip(diffs, equal)]))


if __name__ == "__main__":
    main()
