"""Peak RSS of an `-nv` LLM export of a mixture-of-experts checkpoint (experts stored one
tensor each, as mixtral's are), each export in a fresh process.

    python benches/bench_llm_moe_memory.py [--layers 4] [--python-path DIR ...] [--smoke]

Builds a random Mixtral checkpoint (f32 safetensors, 8 experts, hidden 1024, intermediate
2048; 0.94 GB at 4 layers) in a temporary directory, then exports it once per
``--python-path`` (a ``python/`` directory holding a fastnnef package with its built
extension; default: this tree's), printing the startup RSS (after importing torch,
transformers and fastnnef), the peak, and the export's wall time. ``--smoke`` exports a
1-layer Mixtral of hidden size 64 (a few hundred KB) instead (CI runs it,
tests/test_benches.py); the temporary directory is removed in every case."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys, time
import torch, transformers  # noqa: F401 - the startup every export pays
from fastnnef.llm import dump_llm

def hwm_kib():  # VmHWM, not ru_maxrss: that one survives exec (the parent built the model)
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))

base = hwm_kib()
start = time.perf_counter()
dump_llm(sys.argv[2], local_dir=sys.argv[1], no_verify=True)
peak = hwm_kib()
print(f"startup {base / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, above startup {(peak - base) / 1024:.0f} MiB, "
      f"export {time.perf_counter() - start:.1f} s")
"""

FULL = dict(hidden_size=1024, intermediate_size=2048, num_attention_heads=8, num_key_value_heads=8, vocab_size=8192)
SMOKE = dict(FULL, num_hidden_layers=1, hidden_size=64, intermediate_size=128, vocab_size=256)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--python-path", nargs="*", default=[str(ROOT / "python")])
    parser.add_argument("--smoke", action="store_true", help="tiny run (1 layer, hidden 64) to check the bench works")
    args = parser.parse_args()
    import torch
    import transformers

    dims = SMOKE if args.smoke else {**FULL, "num_hidden_layers": args.layers}
    config = transformers.MixtralConfig(
        **dims, max_position_embeddings=64, tie_word_embeddings=False, num_local_experts=8, num_experts_per_tok=2,
    )
    with tempfile.TemporaryDirectory(prefix="bench-moe-") as tmp:
        checkpoint = Path(tmp) / "ckpt"
        torch.manual_seed(0)
        transformers.AutoModelForCausalLM.from_config(config).save_pretrained(checkpoint)
        size = sum(p.stat().st_size for p in checkpoint.glob("*.safetensors"))
        print(f"checkpoint: {size / 1e6:.1f} MB")
        failed = 0
        for i, path in enumerate(args.python_path):
            proc = subprocess.run([sys.executable, "-c", CHILD, str(checkpoint), str(Path(tmp) / f"out{i}")],
                                  env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
            print(path, proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 else proc.stderr[-2000:])
            failed += proc.returncode != 0
    if failed:
        raise SystemExit(f"{failed} of {len(args.python_path)} exports failed")


if __name__ == "__main__":
    main()
