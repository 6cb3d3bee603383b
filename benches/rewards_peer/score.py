"""The peer of `pointact bench rewards`: Embodied-R1's released reward function, timed on the same
batch as ours, one thread, as EasyR1's reward manager calls it (`embodiedr1_compute_score(response,
ground_truth)` per item).

Usage: python3 score.py --reference .../verl/utils/reward_score/embodiedr1.py --items ITEMS.jsonl
                       [--min-seconds 2]
ITEMS.jsonl: {"response": ..., "ground_truth": ...} per line.
Prints one JSON object: {"n": items, "rounds": r, "seconds": s, "overall_sum": sum of `overall`
over one round (errors count 0), "errors": items that raised}.

The released file is imported from the given path (it is not part of pointact); its packages
(mathruler, sympy, pylatexenc, tqdm, numpy, scipy) must be installed in this Python: see
tests/fixtures/gen_rewards_golden.py for the pins.
"""
import argparse
import importlib.util
import json
import math
import time

ap = argparse.ArgumentParser()
ap.add_argument("--reference", required=True)
ap.add_argument("--items", required=True)
ap.add_argument("--min-seconds", type=float, default=2.0)
a = ap.parse_args()

spec = importlib.util.spec_from_file_location("embodiedr1_released", a.reference)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
fn = mod.embodiedr1_compute_score
items = [json.loads(l) for l in open(a.items, encoding="utf-8") if l.strip()]


def one_round():
    total, errors = 0.0, 0
    for it in items:
        try:
            v = fn(it["response"], it["ground_truth"])["overall"]
            if not math.isnan(v):
                total += v
        except Exception:
            errors += 1
    return total, errors


total, errors = one_round()  # warm-up, and the checksum
rounds, t0 = 0, time.perf_counter()
while True:
    one_round()
    rounds += 1
    if time.perf_counter() - t0 >= a.min_seconds:
        break
print(json.dumps({"n": len(items), "rounds": rounds, "seconds": time.perf_counter() - t0,
                  "overall_sum": total, "errors": errors}))
