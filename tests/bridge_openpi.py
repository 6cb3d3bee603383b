"""The other side of crates/apps/src/tests/bridge_server.rs: openpi-client 0.1.2's own WebsocketClientPolicy, unchanged,
against a pointact bridge server, run by the Python named in POINTACT_PYTHON.

    bridge_openpi.py PORT    connects to ws://127.0.0.1:PORT, runs the exchanges below and prints one
                             JSON line (prefixed `RESULT `) describing what came back

The exchanges, all on one connection (one episode):
  * the metadata openpi's client reads on connect;
  * `{"type": "bogus"}` before the reset (openpi raises the server's text frame as RuntimeError);
  * `reset` of the stand-in's widowx_spoon_on_towel episode 0, in the stock delta-EE control mode;
  * four `infer` steps, each observation built from the stand-in's SimplerEnv-shaped obs dict by
    sim/simplerenv/run.py's own conversion (`obs_to_infer`, segmentation and objects included), the
    stand-in stepped with each action; a second bogus message between steps 0 and 1;
  * `episode_end`.

Nothing is asserted here beyond what is needed to go on: the Rust test asserts on the JSON, which
describes every reply by its type, its action's dtype, shape and finiteness, its status and step.
"""

import json
import os
import sys

import numpy as np
from openpi_client.websocket_client_policy import WebsocketClientPolicy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "sim", "simplerenv"))

import run  # noqa: E402  (sim/simplerenv/run.py: the official runner's observation conversion)
import standin  # noqa: E402

TASK = "widowx_spoon_on_towel"
STEPS = 4


def text(v):
    return v.decode(errors="replace") if isinstance(v, bytes) else v


def plain(x):
    if isinstance(x, dict):
        return {str(text(k)): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    return text(x)


def error_of(policy, msg):
    """What infer(msg) raised: {"raised": class name, "text": message}, or {"raised": None, "reply": ...}."""
    try:
        reply = policy.infer(msg)
    except Exception as e:  # noqa: BLE001 (the class is what the test checks)
        return {"raised": type(e).__name__, "text": str(e)}
    return {"raised": None, "reply": plain(reply)}


def describe_action(reply):
    a = reply.get("action")
    d = {
        "type": text(reply.get("type")),
        "step": plain(reply.get("step")),
        "status": text(reply.get("status")),
        "terminate": plain(reply.get("terminate")),
        "detail": text(reply.get("detail")),
        "is_ndarray": isinstance(a, np.ndarray),
    }
    if isinstance(a, np.ndarray):
        d.update(dtype=str(a.dtype), shape=list(a.shape), finite=bool(np.all(np.isfinite(a))), values=a.tolist())
    return d


def main():
    port = int(sys.argv[1])
    policy = WebsocketClientPolicy(host="127.0.0.1", port=port)
    out = {"metadata": plain(policy.get_server_metadata())}
    out["bogus_before_reset"] = error_of(policy, {"type": "bogus"})

    env = standin.make(TASK, control_mode=run.DELTA_MODE)
    obs, _ = env.reset(options={"obj_init_options": {"episode_id": 0}})
    objects = run.scene_objects(env, TASK)
    ready = policy.infer({
        "type": "reset", "task": TASK, "instruction": env.get_language_instruction(), "episode_id": 0,
        "control_mode": run.DELTA_MODE, "control_freq": run.CONTROL_FREQ, "max_steps": 60,
    })
    out["ready"] = plain(ready)

    actions = []
    first_infer = None
    for step in range(STEPS):
        msg = run.obs_to_infer(obs, step, objects)
        if first_infer is None:
            first_infer = {k: ([str(v.dtype), list(v.shape)] if isinstance(v, np.ndarray) else plain(v))
                           for k, v in msg.items()}
        reply = policy.infer(msg)
        actions.append(describe_action(reply))
        if step == 0:
            out["bogus_mid_episode"] = error_of(policy, {"type": "bogus"})
        obs, _reward, _terminated, _truncated, _info = env.step(np.asarray(reply["action"], dtype=np.float64))
    out["first_infer"] = first_infer
    out["actions"] = actions
    out["ended"] = plain(policy.infer({"type": "episode_end", "success": False, "steps": STEPS}))
    run.close_policy(policy)
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
