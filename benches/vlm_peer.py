#!/usr/bin/env python3
"""PyTorch transformers peer for `pointact bench vlm`.

Usage:

    python3 benches/vlm_peer.py REQUEST.json

REQUEST.json (written by `pointact bench vlm`):
    {"model_dir": "...",      # Hugging Face folder: config.json, preprocessor_config.json, shards
     "threads": 2,            # torch.set_num_threads (OMP/MKL_NUM_THREADS are set by the caller)
     "warmup": QUERY,         # untimed, same as the Rust side's warm-up
     "query": QUERY}          # timed
    QUERY = {"image": "x.png", "input_ids": [...], "image_tokens": N, "max_new_tokens": K}

What is measured (float32 weights, the default attention implementation, inference_mode):
  * load_s: Qwen2_5_VLForConditionalGeneration.from_pretrained(dir, torch_dtype=torch.float32)
    (a request with "load_only": true stops there and prints load_s, the other fields 0);
  * vision_ms: model.visual(pixel_values, grid_thw=image_grid_thw), alone;
  * prefill_ms: time from calling model.generate to its first new token, minus the time the
    vision tower took inside that call (generate runs it again in its first forward; forward
    hooks on model.visual time that run, reported as vision_in_generate_ms, so run-to-run
    variation of the vision tower does not leak into prefill);
  * decode_tok_s: (K - 1) / (time of the last new token - time of the first), from a streamer
    that timestamps every `put` (the first `put` is the prompt, each later one is one token);
    greedy, K tokens exactly (min_new_tokens = max_new_tokens, no eos);
  * peak_rss_bytes: resource.getrusage ru_maxrss (KiB) of this process, loading included;
  * weight_bytes: bytes of the model's parameters (the tied lm_head counted once).
The image goes through Qwen2VLImageProcessor (from the folder's preprocessor_config.json) before
any timing; its image-token count must equal the request's.

Output: one JSON line on stdout with those fields plus "tokens" (generated ids), "decode_steps",
"prompt_tokens" and "version"; or {"error": "..."} with exit code 2. Progress goes to stderr.

When `import torch, transformers` fails, the script creates ~/.cache/pointact/bench-venv, installs
transformers==4.51.3, torch, safetensors, pillow and numpy into it with pip (torch from the CPU
wheel index first, which is much smaller, then from PyPI if that fails) and re-runs itself there.
"""

import json
import os
import resource
import subprocess
import sys
import time

VENV = os.path.expanduser("~/.cache/pointact/bench-venv")
PACKAGES = ["transformers==4.51.3", "torch", "safetensors", "pillow", "numpy"]
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def log(msg):
    print(f"  transformers peer: {msg}", file=sys.stderr, flush=True)


def fail(msg):
    print(json.dumps({"error": msg}), flush=True)
    sys.exit(2)


def run_quiet(cmd):
    """Runs cmd with its output on stderr (stdout is for the result line)."""
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr).returncode == 0


def ensure_packages():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401

        return
    except ImportError as e:
        missing = f"{type(e).__name__}: {e}"
    venv_python = os.path.join(VENV, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        fail(f"{missing}, even inside {VENV}; delete that folder to reinstall")
    log(f"{missing} under {sys.executable}; using the venv {VENV}")
    ready = os.path.exists(venv_python) and subprocess.run(
        [venv_python, "-c", "import torch, transformers"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ).returncode == 0
    if not ready:
        if not os.path.exists(venv_python) and not run_quiet([sys.executable, "-m", "venv", VENV]):
            fail(f"cannot create {VENV} (on Debian/Ubuntu: apt install python3-venv)")
        pip = [venv_python, "-m", "pip", "install", "--quiet"]
        if not run_quiet(pip + ["torch", "--index-url", TORCH_CPU_INDEX]):
            log("the CPU wheel index failed; installing torch from PyPI")
        if not run_quiet(pip + PACKAGES):
            fail(f"pip could not install {' '.join(PACKAGES)} into {VENV}")
    log(f"re-running inside {VENV}")
    sys.stdout.flush()
    os.execv(venv_python, [venv_python] + sys.argv)


def main():
    if len(sys.argv) != 2:
        fail("usage: vlm_peer.py REQUEST.json")
    with open(sys.argv[1]) as f:
        req = json.load(f)
    ensure_packages()

    import torch
    import transformers
    from PIL import Image
    from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2VLImageProcessor
    from transformers.generation.streamers import BaseStreamer

    threads = int(req["threads"])
    torch.set_num_threads(threads)
    model_dir = req["model_dir"]

    log(f"loading {model_dir} (float32)")
    t0 = time.perf_counter()
    model, info = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        model_dir, torch_dtype=torch.float32, output_loading_info=True
    )
    model.eval()
    load_s = time.perf_counter() - t0
    problems = {k: v for k, v in info.items() if v}
    if problems:
        fail(f"the checkpoint does not match the model: {problems}")
    if req.get("load_only"):
        # One of bench vlm's alternated f32 load rounds: the load alone, the rest zero.
        zeros = ["vision_ms", "prefill_ms", "decode_tok_s", "decode_steps", "peak_rss_bytes",
                 "weight_bytes", "prompt_tokens"]
        print(json.dumps({"load_s": load_s, "tokens": [], **{k: 0 for k in zeros}}))
        return
    processor = Qwen2VLImageProcessor.from_pretrained(model_dir)

    def prepare(q):
        image = Image.open(q["image"]).convert("RGB")
        out = processor(images=[image], return_tensors="pt")
        grid = out["image_grid_thw"]
        n = int(grid.prod().item()) // (processor.merge_size**2)
        if n != q["image_tokens"]:
            fail(f"{q['image']} gives {n} image tokens, the request says {q['image_tokens']}")
        ids = torch.tensor([q["input_ids"]], dtype=torch.long)
        return ids, out["pixel_values"], grid

    class Stamps(BaseStreamer):
        """Timestamps each generated token; the first put is the prompt."""

        def __init__(self):
            self.prompt_seen = False
            self.times = []
            self.tokens = []

        def put(self, value):
            now = time.perf_counter()
            if not self.prompt_seen:
                self.prompt_seen = True
                return
            self.times.append(now)
            self.tokens.extend(int(t) for t in value.reshape(-1).tolist())

        def end(self):
            pass

    def generate(q, ids, pixel_values, grid, streamer=None):
        k = q["max_new_tokens"]
        return model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            pixel_values=pixel_values,
            image_grid_thw=grid,
            max_new_tokens=k,
            min_new_tokens=k,
            do_sample=False,
            repetition_penalty=1.0,
            eos_token_id=None,
            streamer=streamer,
        )

    with torch.inference_mode():
        log("warm-up")
        generate(req["warmup"], *prepare(req["warmup"]))

        q = req["query"]
        ids, pixel_values, grid = prepare(q)
        # The sgemm rate of the prefill's MLP product, printed with the columns: MKL picks its
        # kernels by CPU vendor (AVX2 code on AMD whatever the CPU has; `--peer-mkl-intel`).
        rows = int(ids.shape[1])
        a, b = torch.randn(rows, 2048), torch.randn(2048, 11008)
        a @ b
        t = time.perf_counter()
        for _ in range(3):
            a @ b
        sgemm_gflops = 3 * 2 * rows * 2048 * 11008 / (time.perf_counter() - t) / 1e9
        del a, b
        log(f"timed run: {ids.shape[1]} prompt tokens, {q['max_new_tokens']} new tokens")
        t = time.perf_counter()
        model.visual(pixel_values, grid_thw=grid)
        vision_s = time.perf_counter() - t
        stamps = Stamps()
        spans = []
        pre = model.visual.register_forward_pre_hook(lambda *_: spans.append(time.perf_counter()))
        post = model.visual.register_forward_hook(lambda *_: spans.append(time.perf_counter()))
        t_start = time.perf_counter()
        generate(q, ids, pixel_values, grid, streamer=stamps)
        pre.remove()
        post.remove()

    times = stamps.times
    if not times:
        fail("generate produced no tokens")
    if len(spans) != 2:
        fail(f"expected one vision-tower call inside generate, saw {len(spans) // 2}")
    vision_in_generate_s = spans[1] - spans[0]
    steps = len(times) - 1
    decode_s = times[-1] - times[0]
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print(
        json.dumps(
            {
                "load_s": load_s,
                "vision_ms": vision_s * 1e3,
                "vision_in_generate_ms": vision_in_generate_s * 1e3,
                "prefill_ms": ((times[0] - t_start) - vision_in_generate_s) * 1e3,
                "decode_tok_s": steps / decode_s if steps > 0 and decode_s > 0 else 0.0,
                "decode_steps": steps,
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "weight_bytes": weight_bytes,
                "prompt_tokens": int(ids.shape[1]),
                "tokens": stamps.tokens,
                "version": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                f"{torch.get_num_threads()} threads, attention {model.config._attn_implementation}, "
                f"sgemm {rows}x2048x11008 {sgemm_gflops:.0f} GFLOP/s"
                + (f", MKL {os.environ['POINTACT_PEER_MKL']}" if "POINTACT_PEER_MKL" in os.environ else ""),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
