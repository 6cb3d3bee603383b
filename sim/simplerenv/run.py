#!/usr/bin/env python3
"""Official-protocol SimplerEnv (WidowX / Bridge) runner for pointact's `serve bridge` policy server.

    pointact serve bridge --addr 127.0.0.1:8000 --pointer oracle
    python3 sim/simplerenv/run.py --server 127.0.0.1:8000                 # real SimplerEnv, 4 tasks x 24 episodes
    python3 sim/simplerenv/run.py --server 127.0.0.1:8000 --env standin   # numpy stand-in (NOT SimplerEnv)
    python3 sim/simplerenv/run.py --server 127.0.0.1:8000 --env maniskill3  # ManiSkill3's Bridge twins (maniskill3.py)

The policy is the WebSocket server, this script is the client (openpi's `WebsocketClientPolicy`, msgpack frames,
numpy arrays in openpi's encoding). One connection per episode:
  reset -> ready, then infer -> action every control step until the env's TimeLimit truncates the episode
  (60 steps; 120 for the eggplant), then episode_end -> ended.
Official success = info["success"] of the FINAL step (SimplerEnv's maniskill2_evaluator rule). The runner keeps
stepping after the server reports `terminate` (it then sends hold actions).

Dependencies: numpy, openpi-client (and simpler_env for --env simplerenv; the venv of setup.sh for --env maniskill3).
See README.md in this folder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from poses import mat_to_quat, quat_to_mat  # noqa: E402  (this folder's poses.py)

HERE = os.path.dirname(os.path.abspath(__file__))

DELTA_MODE = "arm_pd_ee_target_delta_pose_align2_gripper_pd_joint_pos"
JOINT_MODE = "arm_pd_joint_pos_gripper_pd_joint_pos"
CONTROL_MODES = {"delta": DELTA_MODE, "joint": JOINT_MODE}
ACTION_DIM = {DELTA_MODE: 7, JOINT_MODE: 8}
CONTROL_FREQ = 5.0
CAMERA = "3rd_view_camera"
PROTOCOL_VERSION = 1

# task -> official step budget, table column, phrases for the objects list sent to the server
TASKS = {
    "widowx_spoon_on_towel": dict(budget=60, column="spoon→towel", source="spoon", target="towel"),
    "widowx_carrot_on_plate": dict(budget=60, column="carrot→plate", source="carrot", target="plate"),
    "widowx_stack_cube": dict(budget=60, column="green→yellow block", source="green block", target="yellow block"),
    "widowx_put_eggplant_in_basket": dict(budget=120, column="eggplant→basket", source="eggplant", target="yellow basket"),
}
TASK_ORDER = list(TASKS)

# Published WidowX "visual matching" results (success %, grasp % where the source gives it); each row names
# its source: SpatialVLA/SpatialVLA README.md, SimplerEnv simpler_env/utils/metrics.py (SIMPLER_PERF),
# xyshao23/RoboMAP README.md, qizekun/SoFar README.md (collected in docs/references.md section 6).
# `modular`: non-standard execution (see CAVEATS).
PUBLISHED = [
    # method, [(success, grasp) per task in TASK_ORDER], avg, modular, source
    ("RT-1-X", [(0.0, 16.7), (4.2, 20.8), (0.0, 8.3), (0.0, 0.0)], "1.1", False, "SpatialVLA README"),
    ("Octo-Base", [(12.5, 34.7), (8.3, 52.8), (0.0, 31.9), (43.1, 66.7)], "16.0", False, "SpatialVLA README; SimplerEnv SIMPLER_PERF"),
    ("Octo-Small", [(47.2, 77.8), (9.7, 27.8), (4.2, 40.3), (56.9, 87.5)], "30.0", False, "SpatialVLA README"),
    ("OpenVLA", [(0.0, 4.1), (0.0, 33.3), (0.0, 12.5), (4.1, 8.3)], "1.0", False, "SpatialVLA README"),
    ("RoboVLM (zero-shot)", [(20.8, 37.5), (25.0, 33.3), (8.3, 8.3), (0.0, 0.0)], "13.5", False, "SpatialVLA README"),
    ("SpatialVLA (zero-shot)", [(20.8, 25.0), (20.8, 41.7), (25.0, 58.3), (70.8, 79.2)], "34.4", False, "SpatialVLA README"),
    ("MOKA", [(45.8, None), (41.6, None), (33.3, None), (12.5, None)], "33.3", True, "RoboMAP README"),
    ("SoFar", [(55.5, None), (56.9, None), (62.5, None), (40.2, None)], "53.8", True, "RoboMAP README"),
    ("SoFar (own report)", [(58.3, None), (66.7, None), (70.8, None), (37.5, None)], "58.3", True, "qizekun/SoFar README"),
    ("RoboPoint", [(16.7, None), (20.8, None), (8.3, None), (25.0, None)], "17.7", True, "RoboMAP README"),
    ("FSD", [(41.6, None), (50.0, None), (33.3, None), (37.5, None)], "40.6", True, "RoboMAP README"),
    ("Embodied-R1", [(65.2, None), (68.0, None), (36.1, None), (58.3, None)], "56.2 (as quoted; the four numbers average 56.9)", True, "RoboMAP README"),
]
CAVEATS = [
    "VLA rows (RT-1-X, Octo, OpenVLA, RoboVLM, SpatialVLA) use the official protocol: stock 7-D delta-EE controller, "
    "60/120 steps, final-step success.",
    "† Modular/pointing baselines (MOKA, SoFar, RoboPoint, FSD, Embodied-R1) did NOT: they added an absolute joint-position "
    "controller (arm_pd_joint_pos_gripper_pd_joint_pos), planned with IK + OMPL, executed several hundred steps "
    "(ignoring the 60-step limit) and retried up to 3 times; their numbers are not strictly comparable.",
    "† rows come from RoboMAP's README (reproducing the Embodied-R1 comparison); values like 55.5/40.2/36.1 are k/72 "
    "(3 x 24 runs per task). SoFar's self-report differs (58.3 avg). Embodied-R1's per-task numbers average 56.9, "
    "not the quoted 56.2 (spoon 65.2 vs 62.5 unverified).",
]


class ServerError(Exception):
    """The server could not be reached, closed the connection, answered a text (error) frame or a malformed reply."""


# ----------------------------------------------------------------------------------------------------------------
# small pose helpers (wxyz quaternions, SAPIEN's layout)
# ----------------------------------------------------------------------------------------------------------------


def world_pose_to_base(pose_world, base_pose):
    """[p, q wxyz] in world -> [p, q wxyz] in the robot-base frame, base given as [p, q wxyz] in world."""
    Rb, pb = quat_to_mat(base_pose[3:7]), np.asarray(base_pose[:3], dtype=np.float64)
    R, p = quat_to_mat(pose_world[3:7]), np.asarray(pose_world[:3], dtype=np.float64)
    return np.concatenate([Rb.T @ (p - pb), mat_to_quat(Rb.T @ R)])


# ----------------------------------------------------------------------------------------------------------------
# THE observation conversion (used for SimplerEnv and the stand-in alike)
# ----------------------------------------------------------------------------------------------------------------


def _f64(x, shape, what):
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float64))
    if a.shape != shape:
        raise ValueError(f"observation {what}: expected shape {shape}, got {a.shape}")
    return a


def obs_to_infer(obs, step, objects=None, camera=CAMERA):
    """SimplerEnv obs dict (obs_mode "rgbd"; ManiSkill2_real2sim envs/sapien_env.py, envs/custom_scenes/base_env.py)
    -> protocol `infer` message.

    Every array is a C-contiguous numpy array with an explicit dtype; every scalar is a plain Python value
    (openpi's packb would turn numpy scalars into `__npgeneric__` maps)."""
    img = obs["image"][camera]
    cam = obs["camera_param"][camera]
    agent = obs["agent"]
    rgb = np.ascontiguousarray(np.asarray(img["rgb"]))
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"observation rgb: expected (H, W, 3), got {rgb.shape}")
    if rgb.dtype != np.uint8:  # some wrappers give float [0, 1] or [0, 255]
        scale = 255.0 if float(np.max(rgb)) <= 1.0 else 1.0
        rgb = np.clip(np.asarray(rgb, dtype=np.float64) * scale, 0, 255).astype(np.uint8)
    depth = np.asarray(img["depth"], dtype=np.float32)
    if depth.ndim == 3:
        depth = depth[..., 0]
    depth = np.ascontiguousarray(depth)
    if depth.shape != rgb.shape[:2]:
        raise ValueError(f"observation depth {depth.shape} does not match rgb {rgb.shape[:2]}")
    extr = np.asarray(cam["extrinsic_cv"], dtype=np.float64)
    if extr.shape == (3, 4):
        extr = np.vstack([extr, [0.0, 0.0, 0.0, 1.0]])
    base_pose = _f64(agent["base_pose"], (7,), "agent/base_pose")
    tcp_pose = _f64(obs["extra"]["tcp_pose"], (7,), "extra/tcp_pose")
    arm_state = (agent.get("controller") or {}).get("arm") or {}
    if "target_pose" in arm_state:
        target_pose = _f64(arm_state["target_pose"], (7,), "agent/controller/arm/target_pose")
    else:
        # joint-position controllers keep no EE target: send the measured TCP in the base frame instead
        target_pose = world_pose_to_base(tcp_pose, base_pose)
    msg = {
        "type": "infer",
        "step": int(step),
        "rgb": rgb,
        "depth": depth,
        "intrinsic_cv": _f64(cam["intrinsic_cv"], (3, 3), "camera_param/intrinsic_cv"),
        "extrinsic_cv": _f64(extr, (4, 4), "camera_param/extrinsic_cv"),
        "base_pose": base_pose,
        "tcp_pose": tcp_pose,
        "qpos": _f64(agent["qpos"], (8,), "agent/qpos"),
        "target_pose": target_pose,
    }
    seg = img.get("Segmentation") if hasattr(img, "get") else None
    if seg is not None:
        seg = np.asarray(seg)
        seg = seg[..., 1] if seg.ndim == 3 else seg  # [..., 1] = actor id (level 1)
        msg["segmentation"] = np.ascontiguousarray(seg.astype(np.uint32, copy=False))
        if objects:
            msg["objects"] = [{"id": int(o["id"]), "name": str(o["name"]), "role": str(o["role"])} for o in objects]
    return msg


def _actor_id(actor):
    for attr in ("id",):
        v = getattr(actor, attr, None)
        if v is not None and not callable(v):
            return int(v)
    if hasattr(actor, "get_id"):
        return int(actor.get_id())
    raise AttributeError(f"cannot read the actor id of {actor!r}")


def scene_objects(env, task):
    """[{id, name, role}] for the task's source and target actors (SimplerEnv: env.unwrapped.episode_source_obj /
    episode_target_obj, sapien Actors whose id is the Segmentation level-1 id). Call after reset."""
    u = getattr(env, "unwrapped", env)
    out, missing = [], []
    for role, attr, phrase in (("source", "episode_source_obj", TASKS[task]["source"]),
                               ("target", "episode_target_obj", TASKS[task]["target"])):
        actor = getattr(u, attr, None)
        if actor is None:
            missing.append(attr)
            continue
        out.append({"id": _actor_id(actor), "name": phrase, "role": role})
    if missing:
        print(f"warning: env.unwrapped has no {', '.join(missing)}; the oracle pointer will lack those objects",
              file=sys.stderr)
    return out


# ----------------------------------------------------------------------------------------------------------------
# protocol helpers
# ----------------------------------------------------------------------------------------------------------------


def _plain(x):
    """numpy scalars/arrays inside dicts -> plain Python (for episode_stats and JSON)."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if hasattr(x, "item") and callable(x.item):  # torch scalars
        try:
            return x.item()
        except Exception:
            return str(x)
    return x


def _as_array(x, what):
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, dict) and ("__ndarray__" in x or b"__ndarray__" in x):
        g = lambda k: x.get(k, x.get(k.encode()))  # noqa: E731
        return np.ndarray(buffer=g("data"), dtype=np.dtype(g("dtype")), shape=tuple(g("shape")))
    if isinstance(x, (list, tuple)):
        return np.asarray(x, dtype=np.float64)
    raise ServerError(f"reply field {what!r} is not an array: {type(x).__name__}")


def _get(reply, key, default=None):
    if key in reply:
        return reply[key]
    return reply.get(key.encode(), default) if isinstance(reply, dict) else default


def _text(v):
    return v.decode(errors="replace") if isinstance(v, bytes) else v


def call(policy, msg, expect):
    try:
        reply = policy.infer(msg)
    except RuntimeError as e:  # WebsocketClientPolicy: the server answered a text frame = error
        raise ServerError(f"server answered an error to {msg['type']!r}: {e}") from None
    except Exception as e:  # connection closed, etc.
        raise ServerError(f"connection failed during {msg['type']!r}: {type(e).__name__}: {e}") from None
    if not isinstance(reply, dict):
        raise ServerError(f"reply to {msg['type']!r} is not a map: {type(reply).__name__}")
    rtype = _text(_get(reply, "type"))
    if rtype != expect:
        raise ServerError(f"reply to {msg['type']!r} has type {rtype!r}, expected {expect!r}: {_plain(reply)!r}"[:500])
    return reply


def decode_action(reply, control_mode, step):
    rstep = _get(reply, "step")
    if rstep is not None and int(rstep) != int(step):
        raise ServerError(f"action reply for step {rstep}, expected step {step}")
    a = _as_array(_get(reply, "action"), "action").astype(np.float64).reshape(-1)
    n = ACTION_DIM[control_mode]
    if a.shape != (n,):
        raise ServerError(f"action has shape {a.shape}, control mode {control_mode} needs ({n},)")
    if not np.all(np.isfinite(a)):
        raise ServerError(f"action is not finite: {a}")
    return a.copy()


def close_policy(policy):
    ws = getattr(policy, "_ws", None)  # WebsocketClientPolicy has no public close()
    if ws is not None:
        try:
            ws.close()
        except Exception:
            pass
    elif hasattr(policy, "close"):
        policy.close()


def server_uri(s):
    s = s.strip()
    if s.startswith("ws://") or s.startswith("wss://"):
        return s
    return "ws://" + s


def connect(uri):
    try:
        from openpi_client.websocket_client_policy import WebsocketClientPolicy
    except ImportError as e:
        raise SystemExit(f"error: openpi-client is not installed ({e}); pip install -r sim/simplerenv/requirements-standin.txt (openpi-client 0.1.2 also needs typing_extensions, which it does not declare)")
    try:
        return WebsocketClientPolicy(host=uri)
    except Exception as e:
        raise ServerError(f"cannot reach the policy server at {uri}: {type(e).__name__}: {e} "
                          f"(is `pointact serve bridge --addr ...` running?)") from None


# ----------------------------------------------------------------------------------------------------------------
# environments
# ----------------------------------------------------------------------------------------------------------------


def make_env(kind, task, control_mode, max_episode_steps=None):
    if kind == "standin":
        sys.path.insert(0, HERE)
        import standin

        return standin.make(task, control_mode=control_mode, max_episode_steps=max_episode_steps)
    if kind == "maniskill3":
        sys.path.insert(0, HERE)
        import maniskill3

        # mani_skill reads MS_ASSET_DIR once, at its first import: the adapter's folder (its default when unset) first
        os.environ["MS_ASSET_DIR"] = maniskill3.default_asset_dir()
        try:
            import mani_skill  # noqa: F401
        except ImportError as e:
            raise SystemExit(f"error: cannot import mani_skill ({e}); make the venv with sim/simplerenv/setup.sh and "
                             "run run.py with its python")
        return maniskill3.make(task, control_mode=control_mode, max_episode_steps=max_episode_steps)
    try:
        import simpler_env
    except ImportError as e:
        raise SystemExit(
            f"error: cannot import simpler_env ({e}). Install SimplerEnv + ManiSkill2_real2sim from source "
            "(see sim/simplerenv/README.md), or run with --env standin (NOT SimplerEnv).")
    kw = {}
    if control_mode != DELTA_MODE:
        kw["control_mode"] = control_mode
    if max_episode_steps is not None:
        kw["max_episode_steps"] = int(max_episode_steps)
    try:
        env = simpler_env.make(task, **kw)
    except Exception as e:
        hint = ""
        if control_mode == JOINT_MODE:
            hint = (" (the joint mode is not registered upstream; it needs SoFar's addition to "
                    "ManiSkill2_real2sim/mani_skill2_real2sim/agents/configs/widowx/defaults.py)")
        raise SystemExit(f"error: simpler_env.make({task!r}, {kw}) failed: {type(e).__name__}: {e}{hint}")
    u = env.unwrapped
    actual = getattr(u, "control_mode", None) or getattr(getattr(u, "agent", None), "control_mode", None)
    if actual is not None and actual != control_mode:
        raise SystemExit(f"error: env runs control mode {actual!r}, requested {control_mode!r} "
                         "(the prepackaged config may override it)")
    return env


def env_banner(kind, tasks=None):
    if kind == "standin":
        return "env: stand-in (not SimplerEnv) — sim/simplerenv/standin.py; numbers are NOT SimplerEnv results"
    if kind == "maniskill3":
        sys.path.insert(0, HERE)
        import maniskill3

        return maniskill3.banner(tasks=tasks)
    return "env: SimplerEnv (simpler_env / ManiSkill2_real2sim, visual matching)"


# ----------------------------------------------------------------------------------------------------------------
# episodes
# ----------------------------------------------------------------------------------------------------------------


def run_episode(policy, env, task, episode_id, control_mode, cap, check_target_visible=False):
    obs, _reset_info = env.reset(options={"obj_init_options": {"episode_id": int(episode_id)}})
    instruction = env.get_language_instruction()
    if isinstance(instruction, (list, tuple)):  # ManiSkill3-style batched instruction
        instruction = instruction[0]
    objects = scene_objects(env, task)
    if check_target_visible and objects:
        seg = obs["image"][CAMERA].get("Segmentation")
        if seg is not None:
            ids = set(np.unique(np.asarray(seg)[..., 1]).tolist())
            for o in objects:
                if o["id"] not in ids:
                    print(f"warning: {task} ep {episode_id}: {o['role']} actor id {o['id']} ({o['name']}) is not "
                          "visible in the segmentation (SimplerEnv's eggplant target is an invisible plane; "
                          "the basket belongs to the stage)", file=sys.stderr)
    call(policy, {"type": "reset", "task": task, "instruction": str(instruction), "episode_id": int(episode_id),
                  "control_mode": control_mode, "control_freq": CONTROL_FREQ, "max_steps": int(cap)}, "ready")
    step, ever, grasp, grasp_known = 0, False, False, False
    first_success, first_grasp = None, None  # env steps done when info first said success / consecutive_grasp
    status, detail, terminate_step = "", "", None
    info = {}
    truncated = False
    t0 = time.perf_counter()
    sim_s = 0.0  # time inside env.step: the simulator's own share of the episode (physics, render, its observation)
    while True:
        reply = call(policy, obs_to_infer(obs, step, objects), "action")
        action = decode_action(reply, control_mode, step)
        status = _text(_get(reply, "status", "")) or ""
        detail = _text(_get(reply, "detail", "")) or ""
        if bool(_get(reply, "terminate", False)) and terminate_step is None:
            terminate_step = step
        t_step = time.perf_counter()
        obs, _reward, _terminated, truncated, info = env.step(action)
        sim_s += time.perf_counter() - t_step
        step += 1
        ever = ever or bool(info.get("success", False))
        if ever and first_success is None:
            first_success = step
        if "consecutive_grasp" in info:
            grasp_known = True
            grasp = grasp or bool(info["consecutive_grasp"])
            if grasp and first_grasp is None:
                first_grasp = step
        if bool(truncated) or step >= cap:
            break
    if not bool(truncated):
        print(f"warning: {task} ep {episode_id}: env did not report truncated after {step} steps; stopped at the budget",
              file=sys.stderr)
    success = bool(info.get("success", False))
    stats = _plain(info.get("episode_stats", {}))
    call(policy, {"type": "episode_end", "success": success, "steps": int(step), "episode_stats": stats}, "ended")
    return dict(task=task, episode_id=int(episode_id), success=success, ever_succeeded=ever,
                grasp=grasp if grasp_known else None, steps=step, server_status=status, server_detail=detail,
                server_terminate_step=terminate_step, first_success_step=first_success, first_grasp_step=first_grasp,
                episode_stats=stats, wall_s=round(time.perf_counter() - t0, 3), sim_s=round(sim_s, 3))


# ----------------------------------------------------------------------------------------------------------------
# tables
# ----------------------------------------------------------------------------------------------------------------


def _cell(succ, grasp):
    if succ is None:
        return "—"
    s = f"{succ:.1f}"
    return s + (f" ({grasp:.1f})" if grasp is not None else "")


def summarize(results):
    per = {}
    for task in TASK_ORDER:
        rs = [r for r in results if r["task"] == task]
        if not rs:
            per[task] = None
            continue
        succ = 100.0 * sum(r["success"] for r in rs) / len(rs)
        ever = 100.0 * sum(r["ever_succeeded"] for r in rs) / len(rs)
        gk = [r["grasp"] for r in rs if r["grasp"] is not None]
        grasp = 100.0 * sum(gk) / len(gk) if len(gk) == len(rs) else None
        per[task] = dict(n=len(rs), success=succ, grasp=grasp, ever=ever)
    return per


def time_split(results):
    """Episodes' wall time against the simulator's own share (env.step): what the bridge, the observation's encoding
    and the server's planning add. None without timed episodes."""
    wall = sum(r.get("wall_s", 0.0) for r in results)
    sim = sum(r.get("sim_s", 0.0) for r in results)
    if not results or sim <= 0:
        return None
    return dict(wall_s=round(wall, 3), sim_s=round(sim, 3), ratio=round(wall / sim, 3))


def table_lines(method, per, include_published=True):
    head = "| method | " + " | ".join(TASKS[t]["column"] for t in TASK_ORDER) + " | avg |"
    lines = [head, "|" + "---|" * (len(TASK_ORDER) + 2)]
    done = [per[t] for t in TASK_ORDER if per.get(t)]
    avg = sum(d["success"] for d in done) / len(done) if done else None
    avg_s = "—" if avg is None else f"{avg:.1f}" + ("" if len(done) == len(TASK_ORDER) else f" ({len(done)} of 4 tasks)")
    cells = [_cell(per[t]["success"], per[t]["grasp"]) if per.get(t) else "—" for t in TASK_ORDER]
    lines.append(f"| {method} | " + " | ".join(cells) + f" | {avg_s} |")
    if include_published:
        for name, vals, pavg, modular, _src in PUBLISHED:
            cells = [_cell(s, g) for s, g in vals]
            lines.append(f"| {name}{' †' if modular else ''} | " + " | ".join(cells) + f" | {pavg} |")
    return lines


# ----------------------------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------------------------


def parse_tasks(s):
    if s.strip() == "all":
        return list(TASK_ORDER)
    out = []
    for t in s.split(","):
        t = t.strip()
        if t not in TASKS:
            raise argparse.ArgumentTypeError(f"unknown task {t!r}; choose from {', '.join(TASK_ORDER)} or all")
        out.append(t)
    return out


def parse_episodes(s):
    out = []
    for part in s.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    if not out or any(not 0 <= e < 24 for e in out):
        raise argparse.ArgumentTypeError(f"episodes must be within 0..23: {s!r}")
    return out


def parse_max_steps(s):
    if s == "official":
        return None
    n = int(s)
    if n <= 0:
        raise argparse.ArgumentTypeError("--max-steps must be positive or 'official'")
    return n


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="127.0.0.1:8000", help="ws://host:port or host:port of `pointact serve bridge`")
    p.add_argument("--env", choices=["simplerenv", "standin", "maniskill3"], default="simplerenv",
                   help="simplerenv = SimplerEnv/ManiSkill2_real2sim; maniskill3 = ManiSkill3's Bridge digital twins "
                        "(maniskill3.py); standin = numpy stand-in, NOT SimplerEnv")
    p.add_argument("--tasks", type=parse_tasks, default=list(TASK_ORDER), help="all or a comma list of " + ",".join(TASK_ORDER))
    p.add_argument("--episodes", type=parse_episodes, default=list(range(24)), help="e.g. 0-23 or 0,1,5 (default 0-23)")
    p.add_argument("--max-steps", type=parse_max_steps, default=None,
                   help="official (60, eggplant 120; the default) or N = EXTENDED budget, not the official protocol")
    p.add_argument("--control-mode", choices=list(CONTROL_MODES), default="delta",
                   help="delta = stock 7-D " + DELTA_MODE + " (official); joint = 8-D " + JOINT_MODE + " (SoFar's, not upstream)")
    p.add_argument("--method-name", default=None, help='table row label, e.g. "pointact (oracle)"')
    p.add_argument("--json", default=None, help="write per-episode results and the table to this file")
    return p


def main(argv=None, policy_factory=None, env_factory=None):
    """Returns the exit status. `policy_factory()` (tests) replaces the WebSocket connection; it must return an object
    with get_server_metadata() and infer(dict); `env_factory(kind, task, control_mode, max_episode_steps)` replaces
    make_env."""
    args = build_parser().parse_args(argv)
    control_mode = CONTROL_MODES[args.control_mode]
    uri = server_uri(args.server)
    policy_factory = policy_factory or (lambda: connect(uri))
    env_factory = env_factory or make_env
    official = args.max_steps is None
    budget_line = ("step budget: official (60 steps; 120 for eggplant→basket), SimplerEnv TimeLimit truncation"
                   if official else
                   f"step budget: EXTENDED budget ({args.max_steps} steps), not the official protocol")
    rule_line = 'success rule: final-step info["success"], the official SimplerEnv rule ' \
                "(ever-succeeded and grasp = ever consecutive_grasp are recorded for information)"
    print(f"== SimplerEnv WidowX runner == {env_banner(args.env, args.tasks)}")
    print(f"server: {uri}  control mode: {control_mode}" + ("" if control_mode == DELTA_MODE else
                                                            "  (NOT the official controller)"))
    print(budget_line)
    ep_tag = ""
    if args.env == "maniskill3":
        sys.path.insert(0, HERE)
        import maniskill3

        if maniskill3.stand_in_table_used(tasks=args.tasks):
            ep_tag = f"  [{maniskill3.STAND_IN_LABEL}]"
        print("actions: protocol (SimplerEnv align2 frame, axis-angle) converted exactly to ManiSkill3 3.0.1's "
              "root-frame / euler-XYZ delta controller (maniskill3.py)")

    results = []
    meta_seen = None
    method = args.method_name
    try:
        for task in args.tasks:
            cap = TASKS[task]["budget"] if official else args.max_steps
            env = env_factory(args.env, task, control_mode, None if official else args.max_steps)
            for ep in args.episodes:
                policy = policy_factory()
                try:
                    meta = _plain(policy.get_server_metadata() or {})
                    if meta_seen is None:
                        meta_seen = meta
                        print(f"server metadata: {meta}")
                        modes = meta.get("control_modes")
                        if modes and control_mode not in modes:
                            raise ServerError(f"server does not support control mode {control_mode} (offers {modes})")
                        if meta.get("protocol") not in (None, PROTOCOL_VERSION):
                            raise ServerError(f"server speaks protocol {meta.get('protocol')}, runner speaks {PROTOCOL_VERSION}")
                    r = run_episode(policy, env, task, ep, control_mode, cap, check_target_visible=(args.env != "standin"))
                finally:
                    close_policy(policy)
                results.append(r)
                g = "-" if r["grasp"] is None else int(r["grasp"])
                print(f"{task:<30} ep {ep:>2}  success={int(r['success'])} ever={int(r['ever_succeeded'])} grasp={g} "
                      f"steps={r['steps']:>3} server_done_at={r['server_terminate_step']} status={r['server_status']} "
                      f"detail={r['server_detail']!r}{ep_tag}", flush=True)
            if hasattr(env, "close"):
                env.close()
    except ServerError as e:
        print(f"error: {e}", file=sys.stderr)
        print(f"error: aborted after {len(results)} completed episode(s)", file=sys.stderr)
        return 2

    if method is None:
        pointer = (meta_seen or {}).get("pointer")
        method = f"pointact ({pointer})" if pointer else "pointact"
    if args.env == "standin":
        method += " [stand-in, not SimplerEnv]"
    if args.env == "maniskill3":
        method += " [ManiSkill3]" + (f" [{ep_tag.strip()[1:-1]}]" if ep_tag else "")
    if not official:
        method += f" [EXTENDED {args.max_steps} steps]"
    if control_mode != DELTA_MODE:
        method += " [joint controller]"
    per = summarize(results)
    lines = table_lines(method, per)
    print()
    print(f"## WidowX results — {env_banner(args.env, args.tasks)}")
    counts = ", ".join(f"{TASKS[t]['column']} {per[t]['n']}" for t in TASK_ORDER if per.get(t))
    print(f"episodes per task: {counts}")
    print("success % (grasp % = ever consecutive_grasp, in parentheses)")
    print()
    for ln in lines:
        print(ln)
    print()
    print(rule_line)
    print(budget_line)
    ever = ", ".join(f"{TASKS[t]['column']} {per[t]['ever']:.1f}" for t in TASK_ORDER if per.get(t))
    print(f"ever succeeded % (information only, not the official rule): {ever}")
    timing = time_split(results)
    if timing:
        print(f"time: {timing['wall_s']:.1f} s in episodes, {timing['sim_s']:.1f} s of it in env.step "
              f"(wall / simulator = {timing['ratio']:.2f}x)")
    for c in CAVEATS:
        print(c)
    if ep_tag:
        print(ep_tag.strip()[1:-1])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(env=args.env, env_banner=env_banner(args.env, args.tasks), server=uri, server_metadata=meta_seen,
                           control_mode=control_mode, budget="official" if official else args.max_steps,
                           success_rule="final-step info['success']", method=method, per_task=per,
                           table_markdown=lines, caveats=CAVEATS, episodes=results, time=timing,
                           **({"warning": ep_tag.strip()[1:-1]} if ep_tag else {})), f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
