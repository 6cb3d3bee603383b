"""pointact's reward service from Python trainers: Embodied-R1's released rewards, scored by
`pointact serve rewards` (one copy of the reward code, in Rust, for every node of a Ray cluster).

Standard library only: copy this file next to your trainer, or put `python/` on PYTHONPATH.

Start the service once (on each node, or once with --addr 0.0.0.0:8765 and point every node at it):

    pointact serve rewards --addr 127.0.0.1:8765

Environment:
    POINTACT_REWARDS_URL       service base URL (default http://127.0.0.1:8765)
    POINTACT_REWARDS_TIMEOUT   seconds per request (default 600)
    POINTACT_REWARDS_ON_ERROR  what a bad item gives: "zero" (default: every component 0, the
                               error counted in `errors()` and logged once per kind) or "raise"
                               (RewardError, as the released Python raises for a bad ground truth)

Scoring functions, by trainer:
    EasyR1, sequential (Embodied-R1's own `CustomRewardManager`, newer EasyR1 `reward_type:
    sequential`):  worker.reward.reward_function=python/pointact_rewards.py:compute_score
        compute_score(predict_str, ground_truth) -> dict   (the released dict, "overall" among it)
    EasyR1, batch (`reward_type: batch`):
        compute_score_batch(reward_inputs) -> list[dict]    (inputs: dicts with "response" and
                                                             "ground_truth")
    verl (custom_reward_function.path=python/pointact_rewards.py, name=verl_compute_score):
        verl_compute_score(data_source, solution_str, ground_truth, extra_info=None) -> dict
            ("score" is "overall"; the other keys are logged by verl as extra metrics)
    verl BatchRewardManager (name=verl_compute_score_batch):
        verl_compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos) -> list
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

__all__ = [
    "RewardError",
    "score_batch",
    "compute_score",
    "compute_score_batch",
    "verl_compute_score",
    "verl_compute_score_batch",
    "errors",
]

# Bad items seen, by kind; kinds already reported on stderr. (A bad item's zero holds `overall`
# only: a ground truth that cannot be parsed has no task type, hence no component names.)
_ERRORS = {}
_WARNED = set()


class RewardError(RuntimeError):
    """An item the service could not score (the released code raises for it)."""


def _url():
    return os.environ.get("POINTACT_REWARDS_URL", "http://127.0.0.1:8765").rstrip("/")


def _on_error():
    mode = os.environ.get("POINTACT_REWARDS_ON_ERROR", "zero")
    if mode not in ("zero", "raise"):
        raise ValueError("POINTACT_REWARDS_ON_ERROR must be zero or raise, not %r" % mode)
    return mode


def errors():
    """Bad items seen so far in this process, by error kind (the exception class named)."""
    return dict(_ERRORS)


def score_batch(items, url=None, timeout=None):
    """Scores [(response, ground_truth), ...] in one request (in parts, when the service
    refuses the whole as too large); a list of results in the same order, each the released
    dict or {"error": "..."}."""
    body = json.dumps(
        {"items": [{"response": r, "ground_truth": g} for r, g in items]}
    ).encode("utf-8")
    req = urllib.request.Request(
        (url or _url()) + "/score",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    t = float(timeout or os.environ.get("POINTACT_REWARDS_TIMEOUT", "600"))
    deadline = time.monotonic() + t
    pause = 0.25
    while True:
        try:
            with urllib.request.urlopen(req, timeout=t) as resp:
                answer = json.loads(resp.read().decode("utf-8"))
            break
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")
            # 503: the service holds as many request bodies as it may (--max-bodies-mib);
            # another trainer worker's batch finishes soon.
            if e.code == 503 and time.monotonic() + pause < deadline:
                time.sleep(pause)
                pause = min(pause * 2, 4.0)
                continue
            # 413: the batch is over what the service takes in one request (--max-body-mib,
            # --max-batch-polygon-tests); its halves are scored apart, in order.
            if e.code == 413 and len(items) > 1:
                half = len(items) // 2
                return score_batch(items[:half], url, timeout) + score_batch(
                    items[half:], url, timeout
                )
            raise RewardError("reward service answered %d: %s" % (e.code, detail)) from None
        except urllib.error.URLError as e:
            raise RewardError(
                "cannot reach the reward service at %s (is `pointact serve rewards` running?): %s"
                % (url or _url(), e.reason)
            ) from None
    results = answer.get("results")
    if not isinstance(results, list) or len(results) != len(items):
        raise RewardError("reward service sent %r, not one result per item" % (answer,))
    return results


def _settle(result):
    """A result for the trainer: the dict, or the error's zero / exception."""
    if "error" not in result:
        return result
    why = str(result["error"])
    if _on_error() == "raise":
        raise RewardError(why)
    kind = why.split(":", 1)[0]
    _ERRORS[kind] = _ERRORS.get(kind, 0) + 1
    if kind not in _WARNED:
        _WARNED.add(kind)
        print("pointact_rewards: scored 0 for a bad item (%s); more of this kind are counted in "
              "errors()" % why[:300], file=sys.stderr)
    return {"overall": 0.0}


def compute_score(predict_str, ground_truth):
    """EasyR1 sequential / Embodied-R1's signature: the released score dict."""
    return _settle(score_batch([(predict_str, ground_truth)])[0])


def compute_score_batch(reward_inputs, *args, **kwargs):
    """EasyR1 batch signature: one dict per input ({"response", "ground_truth", ...})."""
    items = [(x["response"], x["ground_truth"]) for x in reward_inputs]
    return [_settle(r) for r in score_batch(items)] if items else []


def _verl(result):
    out = dict(result)
    out["score"] = out.get("overall", 0.0)
    return out


def verl_compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """verl's custom reward signature: the released dict plus "score" (= "overall")."""
    return _verl(compute_score(solution_str, ground_truth))


def verl_compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None,
                             **kwargs):
    """verl BatchRewardManager's signature: one dict per item, "score" among its keys."""
    items = list(zip(solution_strs, ground_truths))
    return [_verl(_settle(r)) for r in score_batch(items)] if items else []
