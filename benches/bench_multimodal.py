"""fastnnef-multimodal against torch_to_nnef_llm's t2n_export_multimodal_to_tract on the same
local Qwen2.5-VL checkpoint (random weights, built here): wall time, peak RSS (VmHWM) and
peak RssAnon of each command, fresh processes, the two commands alternated.

Both run with ``-nv`` (export cost only); ``--verify`` adds a fastnnef run with its full
check (tract runs both artefacts and 16 generated tokens). The reference gets a stub
``--tract-specific-path`` (it otherwise downloads tract at construction). When both ran,
their decoder artefacts are loaded by the linked tract and run on the same prompt bundle:
the outputs must agree (the vision artefacts take differently laid out pixels).

The checkpoint (a ~1.2 GB f32 Qwen2.5-VL at ``--scales 1``, scaled by layer count; the
processor is tests/multimodal/tiny.py's, built offline) is written by a separate process,
so that the parent's peak RSS does not leak into the children's. It also gets the files
transformers 4 reads (``preprocessor_config.json``, ``rope_scaling``, a tokenizer class it
knows): torch_to_nnef_llm 0.24.12 fails under transformers 5 (its cache patch takes no
``kwargs``), so it runs in an environment with transformers 4.57, e.g.
    python -m venv /tmp/refenv && /tmp/refenv/bin/pip install torch 'transformers<5' pillow torchvision
    pip install --target /tmp/t2n --no-deps torch_to_nnef==0.24.12 torch_to_nnef_llm==0.24.12 \\
        nnef nnef-tools mako pyyaml six
    PYTHONPATH=python .venv/bin/python benches/bench_multimodal.py \\
        --reference /tmp/t2n --reference-python /tmp/refenv/bin/python --verify --cleanup
Peak memory against model size (fastnnef alone, ~0.5 and ~2.2 GB):
    PYTHONPATH=python .venv/bin/python benches/bench_multimodal.py --skip-reference --scales 0.25 2 --cleanup
Without ``--reference``, the reference runs from ``--reference-python`` if it can import
torch_to_nnef_llm, and is skipped with a note otherwise. ``--smoke`` exports a tiny
Qwen2.5-VL in a temporary directory, removed afterwards (CI runs it, tests/test_benches.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_llm_vs_torch_to_nnef import FASTNNEF_PYTHON, stub_tract

ROOT = FASTNNEF_PYTHON.parent
# At --scales 1: ~1.2 GB of f32 weights. Text: Qwen2.5-like, head dim 64 (mrope sections
# sum to 32). Vision: Qwen2.5-VL's width (1280, 16 heads) at 8 of its 32 blocks; the
# processor's 2-pixel patches keep the traced sample images small.
TEXT = dict(num_hidden_layers=8, hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
            num_key_value_heads=2, vocab_size=32000, max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [8, 12, 12]})
VISION = dict(depth=8, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=1024)
SMOKE_SCALE = 0.0  # --smoke: tests/multimodal/tiny.py's dimensions as they are


def build_checkpoint(directory: Path, scale: float) -> Path:
    """The checkpoint in ``directory/qwen2_5_vl`` (reused when present), saved by a separate
    process: ru_maxrss survives exec, so a child forked from a process that held the model
    would report the parent's peak. The reference wants ``-d`` to hold one subdirectory."""
    if not (directory / "qwen2_5_vl" / "config.json").is_file():
        subprocess.run([sys.executable, __file__, "--build", str(directory), "--scales", str(scale)], check=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(FASTNNEF_PYTHON), str(ROOT)])})
    return directory / "qwen2_5_vl"


def _build(directory: Path, scale: float) -> None:
    import torch
    import transformers

    sys.path.insert(0, str(ROOT))
    from tests.multimodal.tiny import FAMILIES

    config, processor = FAMILIES["qwen2_5_vl"]()
    if scale != SMOKE_SCALE:
        layers = max(1, round(TEXT["num_hidden_layers"] * scale))
        depth = max(1, round(VISION["depth"] * scale))
        full = config.to_dict()
        full["text_config"].pop("layer_types", None)  # one per tiny layer: derived again from the count
        config = transformers.Qwen2_5_VLConfig(**{
            **full,
            "text_config": {**full["text_config"], **TEXT, "num_hidden_layers": layers, "initializer_range": 0.02},
            "vision_config": {**full["vision_config"], **VISION, "depth": depth, "initializer_range": 0.02,
                              "fullatt_block_indexes": list(range(3, depth, 4)) or [depth - 1]},
            "initializer_range": 0.02,
        })
    checkpoint = directory / "qwen2_5_vl"
    torch.manual_seed(0)
    transformers.Qwen2_5_VLForConditionalGeneration(config).save_pretrained(checkpoint)
    processor.save_pretrained(checkpoint)
    readable_by_transformers4(checkpoint)


def readable_by_transformers4(checkpoint: Path) -> None:
    """Add what transformers 4 reads beside what transformers 5 wrote (each ignores the
    other's): the image and video processors in their own files, the text config's mrope
    sections as ``rope_scaling``, and a tokenizer class transformers 4 has."""
    processors = json.loads((checkpoint / "processor_config.json").read_text())
    for key, name in (("image_processor", "preprocessor_config.json"),
                      ("video_processor", "video_preprocessor_config.json")):
        (checkpoint / name).write_text(json.dumps({**processors[key],
                                                   "processor_class": processors["processor_class"]}))
    config = json.loads((checkpoint / "config.json").read_text())
    rope = config["text_config"]["rope_parameters"]
    for section in (config, config["text_config"]):
        section["rope_scaling"] = {"type": "mrope", "mrope_section": rope["mrope_section"]}
        section["rope_theta"] = rope["rope_theta"]
    (checkpoint / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer = json.loads((checkpoint / "tokenizer_config.json").read_text())
    tokenizer["tokenizer_class"] = "PreTrainedTokenizerFast"
    tokenizer["additional_special_tokens"] = tokenizer.pop("extra_special_tokens", [])
    (checkpoint / "tokenizer_config.json").write_text(json.dumps(tokenizer, indent=2))


def _status_kib(pid: int) -> dict[str, int]:
    try:
        with open(f"/proc/{pid}/status") as status:
            return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in status)
                    if k in ("VmHWM", "RssAnon")}
    except (FileNotFoundError, ProcessLookupError):
        return {}


def measure(command: list[str], env: dict[str, str]) -> dict[str, float]:
    """Wall seconds, peak RSS and peak RssAnon (MiB) of ``command``, a fresh process.
    /proc/<pid>/status is sampled every 20 ms (VmHWM, RssAnon); the peak RSS is the
    larger of the last VmHWM seen and ru_maxrss, which also covers waited-for children."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err)
        hwm = anon = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            sample = _status_kib(proc.pid)
            hwm, anon = max(hwm, sample.get("VmHWM", 0)), max(anon, sample.get("RssAnon", 0))
            time.sleep(0.02)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(command)} failed:\n{err.read().decode()[-3000:]}")
    return {"wall": wall, "rss": max(hwm, usage.ru_maxrss) / 1024, "anon": anon / 1024}


def decoders_against_bundles(ours: Path, reference: Path) -> None:
    """Each decoder artefact, run by the linked tract on each export's prompt bundle (the
    inputs and PyTorch's outputs it saved), against those outputs: the largest absolute
    difference of the first output (the logits). Printed, not asserted: the reference's
    artefact does not match its own bundle on these random models."""
    import numpy as np

    from fastnnef.check import TractArtefact

    artefacts = {name: TractArtefact.load(d / "model.nnef.tgz") for name, d in
                 (("fastnnef", ours), ("reference", reference))}
    for bundle_name, bundle in (("fastnnef", ours), ("reference", reference)):
        with np.load(bundle / "tests" / "prompt_inputs.npz") as inputs, \
                np.load(bundle / "tests" / "prompt_outputs.npz") as outputs:
            errors = []
            for name, artefact in artefacts.items():
                got = artefact.run([inputs[n] for n in artefact.input_names])[0]
                errors.append(f"{name}'s artefact {np.abs(got - outputs[artefact.output_names[0]]).max():.2e}")
        print(f"{bundle_name}'s prompt bundle, max abs difference of the logits: {', '.join(errors)}")


def reference_missing(python: str, path: Path | None) -> str:
    """Why ``python`` cannot import torch_to_nnef_llm's CLI ('' when it can)."""
    env = {**os.environ, "PYTHONPATH": str(path)} if path else dict(os.environ)
    probe = subprocess.run([python, "-c", "import torch_to_nnef_llm.cli"], env=env, capture_output=True, text=True)
    return "" if probe.returncode == 0 else (probe.stderr.strip().splitlines() or ["?"])[-1]


def commands(args: argparse.Namespace, checkpoint: Path, workdir: Path) -> dict[str, tuple[list[str], dict, Path]]:
    """name -> (command line, environment, export directory)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(FASTNNEF_PYTHON)}
    ours = [sys.executable, "-m", "fastnnef.multimodal", "-d", str(checkpoint)]
    runs = {"fastnnef-multimodal -nv": ([*ours, "-nv", "-e", str(workdir / "fastnnef")], env, workdir / "fastnnef")}
    if args.verify:
        runs["fastnnef-multimodal (verified)"] = ([*ours, "-e", str(workdir / "verified")], env, workdir / "verified")
    if not args.skip_reference:
        ref_env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        if args.reference:
            ref_env["PYTHONPATH"] = str(args.reference)
        else:
            ref_env.pop("PYTHONPATH", None)
        runs["t2n_export_multimodal_to_tract -nv"] = (
            [args.reference_python, "-c", "from torch_to_nnef_llm.cli import main_multimodal; main_multimodal()",
             "-d", str(checkpoint.parent), "-nv", "--tract-specific-path", str(stub_tract(workdir)),
             "-e", str(workdir / "reference")],
            ref_env, workdir / "reference",
        )
    return runs


def compare(args: argparse.Namespace, workdir: Path, scale: float) -> None:
    """Build (or reuse) the checkpoint at ``scale``, run the commands alternated, print rows."""
    workdir.mkdir(parents=True, exist_ok=True)
    checkpoint = build_checkpoint(workdir / f"checkpoint-{scale}", scale)
    gb = sum(p.stat().st_size for p in checkpoint.glob("*.safetensors")) / 1e9
    from safetensors import safe_open

    shapes = []
    for shard in checkpoint.glob("*.safetensors"):
        with safe_open(str(shard), "np") as f:
            shapes += [f.get_slice(k).get_shape() for k in f.keys()]
    largest = max(shapes, key=math.prod)
    print(f"checkpoint {checkpoint} ({gb:.2f} GB of safetensors; largest tensor {list(largest)}); "
          f"load average {os.getloadavg()[0]:.1f}")
    runs = commands(args, checkpoint, workdir)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
    results["startup (imports only)"] = [measure(
        [sys.executable, "-c",
         "import torch, transformers; from transformers import Qwen2_5_VLForConditionalGeneration"],
        runs["fastnnef-multimodal -nv"][1])]
    for _ in range(args.repeat):
        for name, (command, env, out) in runs.items():
            shutil.rmtree(out, ignore_errors=True)
            results[name].append(measure(command, env))
    if "t2n_export_multimodal_to_tract -nv" in runs:
        decoders_against_bundles(workdir / "fastnnef" / "decoder", workdir / "reference" / "decoder")
    startup = results["startup (imports only)"][0]["rss"]
    for name, measures in results.items():
        walls = [m["wall"] for m in measures]
        rss, anon = max(m["rss"] for m in measures), max(m["anon"] for m in measures)
        print(f"| {gb:.2f} GB | {name} | {statistics.median(walls):.2f} | {min(walls):.2f} | {rss:.0f} | "
              f"{anon:.0f} | {rss - startup:+.0f} |")
    for _, _, out in runs.values():
        shutil.rmtree(out, ignore_errors=True)
    if args.cleanup:
        shutil.rmtree(checkpoint.parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, help="folder where torch_to_nnef_llm is installed (PYTHONPATH)")
    parser.add_argument("--reference-python", default=sys.executable,
                        help="interpreter that runs the reference (one with transformers 4)")
    parser.add_argument("--skip-reference", action="store_true", help="time fastnnef-multimodal only")
    parser.add_argument("--verify", action="store_true", help="also time fastnnef-multimodal with its check")
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0],
                        help="layer-count factors, one checkpoint each (1: ~1.2 GB f32)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each command, alternated")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fastnnef-multimodal-bench"))
    parser.add_argument("--cleanup", action="store_true", help="delete each checkpoint after its runs")
    parser.add_argument("--smoke", action="store_true", help="tiny Qwen2.5-VL in a temporary directory")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)  # the checkpoint-building child
    args = parser.parse_args()
    if args.build:
        _build(args.build, args.scales[0])
        return
    if not args.skip_reference and (missing := reference_missing(args.reference_python, args.reference)):
        print(f"(reference skipped: {args.reference_python} cannot import torch_to_nnef_llm: {missing})")
        args.skip_reference = True
    print("| checkpoint | command | wall s (median of runs) | min s | peak RSS MiB | peak RssAnon MiB | "
          "RSS above startup MiB |")
    print("|---|---|---:|---:|---:|---:|---:|")
    if args.smoke:
        args.repeat = 1
        with tempfile.TemporaryDirectory(prefix="fastnnef-multimodal-bench-") as tmp:
            compare(args, Path(tmp), SMOKE_SCALE)
        return
    for scale in args.scales:
        compare(args, args.workdir, scale)
    if args.cleanup:
        shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
