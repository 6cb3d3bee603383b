"""The peer of `pointact bench grpo`: TRL's GRPOTrainer on the same tiny Qwen2.5-VL, image, prompt,
group size, completion length, reward and thread count as our trainer (crates/apps/src/train/grpo).

Usage: python3 trl_peer.py REQUEST.json   (REQUEST.json is written by `pointact bench grpo`; the
caller sets OMP_NUM_THREADS / MKL_NUM_THREADS and this script calls torch.set_num_threads.)

The workload, per optimizer step: `batch` prompts (the same image and question each) x `group`
sampled completions of exactly `max_new_tokens` tokens (min_new_tokens = max_new_tokens, so EOS
is never sampled and nothing is masked), reward = characters of the decoded completion / 100,
group advantages (std-scaled, eps 1e-4), token-mean loss (loss_type "bnpo"), one update per
generation batch (num_iterations 1, no grad accumulation), AdamW (weight decay 0, constant lr),
grad-norm clip 1.0, float32 on CPU, the vision tower frozen (ours trains the text decoder).

Timing: wall clock between consecutive `on_step_end` callbacks, so each step counts everything
the trainer does between two updates (data loading, generation, rewards, forward/backward,
optimizer); the first step (warm-up) is left out. `_generate_and_score_completions` is timed
too (the rollout share). Prints one JSON object on stdout.
"""
import json
import os
import shutil
import sys
import tempfile
import time


def main():
    req = json.load(open(sys.argv[1], encoding="utf-8"))
    threads = int(req["threads"])
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import torch

    torch.set_num_threads(threads)
    import datasets
    import transformers
    import trl
    from PIL import Image
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    torch.manual_seed(req["seed"])

    model_dir = req["model_dir"]
    b, g, length = req["batch"], req["group"], req["max_new_tokens"]
    processor = AutoProcessor.from_pretrained(model_dir)
    if processor.chat_template is None:
        # The fixture keeps the chat template in tokenizer_config.json only (4.51.3's layout);
        # processors since 4.52 read their own file.
        processor.chat_template = processor.tokenizer.chat_template
    ip = processor.image_processor
    ip.max_pixels = req["max_pixels"]
    if isinstance(getattr(ip, "size", None), dict) and "longest_edge" in ip.size:
        ip.size["longest_edge"] = req["max_pixels"]
    image = Image.open(req["image"]).convert("RGB")
    prompt = [{"role": "user", "content": req["question"]}]

    # What the trainer will feed the model, checked against ours before any timing.
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": req["question"]}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    enc = processor(text=[text], images=[[image]], return_tensors="pt")
    image_tokens = int(enc["image_grid_thw"].prod().item()) // (ip.merge_size**2)
    prompt_tokens = int(enc["input_ids"].shape[1])

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(model_dir, torch_dtype=torch.float32)
    visual = getattr(model, "visual", None) or model.model.visual
    for p in visual.parameters():
        p.requires_grad_(False)
    # The random tiny model samples any id, and transformers' forward counts every
    # <|image_pad|> in input_ids (completions included) as an image slot: a sampled one makes the
    # training forward fail. So the vision special tokens are never sampled here (ours treats
    # response tokens as text and needs no such rule).
    c = model.config
    vision_ids = sorted(
        {c.vision_start_token_id, c.vision_end_token_id, c.image_token_id, c.video_token_id}
        | {processor.tokenizer.convert_tokens_to_ids("<|vision_pad|>")}
    )
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)

    def length_reward(completions, **kwargs):
        out = []
        for c in completions:
            t = c[-1]["content"] if isinstance(c, list) else c
            out.append(len(t) / 100.0)
        return out

    ds = datasets.Dataset.from_dict({"prompt": [prompt] * b, "image": [image] * b})
    out_dir = tempfile.mkdtemp(prefix="pointact-grpo-trl-")
    args = GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=b * g,
        num_generations=g,
        gradient_accumulation_steps=1,
        max_steps=1 + req["steps"],
        max_prompt_length=None,
        max_completion_length=length,
        generation_kwargs={"min_new_tokens": length, "suppress_tokens": vision_ids},
        temperature=1.0,
        top_p=1.0,
        learning_rate=req["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=req["beta"],
        num_iterations=1,
        epsilon=0.2,
        loss_type="bnpo",
        scale_rewards=True,
        bf16=False,
        fp16=False,
        use_cpu=True,
        seed=req["seed"],
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        dataloader_num_workers=0,
        disable_tqdm=True,
    )

    class Stamps(TrainerCallback):
        def __init__(self):
            self.ends = []
            self.logs = {}

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.update(logs or {})

    stamps = Stamps()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=length_reward,
        args=args,
        train_dataset=ds,
        processing_class=processor,
        callbacks=[stamps],
    )
    # Time generation + scoring (called once per step here: one generation batch per update).
    rollout = []
    generate_and_score = trainer._generate_and_score_completions

    def timed(*a, **k):
        t = time.perf_counter()
        out = generate_and_score(*a, **k)
        rollout.append(time.perf_counter() - t)
        return out

    trainer._generate_and_score_completions = timed
    # stdout carries only the result line; the trainer's own prints go to stderr.
    real_stdout, sys.stdout = sys.stdout, sys.stderr
    try:
        trainer.train()
    finally:
        sys.stdout = real_stdout
        # The trainer's output folder (no checkpoints are saved) is ours to remove.
        shutil.rmtree(out_dir, ignore_errors=True)
    ends = stamps.ends
    if len(ends) != 1 + req["steps"]:
        raise SystemExit(f"expected {1 + req['steps']} steps, saw {len(ends)}")
    m = stamps.logs  # means over the run (logging_strategy "no": one log at the end)
    print(
        json.dumps(
            {
                "steps": req["steps"],
                "seconds": ends[-1] - ends[0],
                "step_seconds": [y - x for x, y in zip(ends, ends[1:])],
                "rollout_seconds": sum(rollout[1:]) if len(rollout) == len(ends) else None,
                "prompt_tokens": prompt_tokens,
                "image_tokens": image_tokens,
                "min_length": m.get("completions/min_length"),
                "max_length": m.get("completions/max_length"),
                "trainable": trainable,
                "threads": torch.get_num_threads(),
                "version": f"trl {trl.__version__}, transformers {transformers.__version__}, "
                f"torch {torch.__version__}, attention {model.config._attn_implementation}",
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
