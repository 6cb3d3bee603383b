#!/usr/bin/env python3
"""Self-checks for the SimplerEnv stand-in and run.py, without the Rust server.   env: stand-in (not SimplerEnv)

    python3 sim/simplerenv/standin_selftest.py            # everything (~1-2 min on 2 cores)
    python3 sim/simplerenv/standin_selftest.py --quick    # 3 episodes per task

1. kinematics: FK of the initial qpos is finite and plausible; IK round-trips random reachable poses;
2. controller: one delta step computed with the absolute-pose formula (docs/references.md section 5) lands the
   controller target exactly on the desired pose (stock `arm_pd_ee_target_delta_pose_align2` semantics);
3. observation: the infer message built by run.obs_to_infer back-projects (depth + intrinsics + extrinsic + base pose)
   onto the source object's box;
4. a scripted EXPERT (privileged object poses, top-down pick and place, the same formula) drives all 4 tasks x 24
   episodes through run.main's loop via an in-process fake server with the protocol's get_server_metadata/infer
   interface (messages round-trip through openpi's msgpack encoding); must succeed on most episodes within the
   official 60/120-step budgets;
5. the same expert behind a real local WebSocket server (openpi's WebsocketClientPolicy end to end), plus the
   error paths (server answers a text frame; server unreachable) -> non-zero exit status;
6. the 8-D joint control mode on a few episodes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run  # noqa: E402
import standin as S  # noqa: E402

from openpi_client import msgpack_numpy  # noqa: E402

FAILS = []


def check(cond, what):
    print(("  ok   " if cond else "  FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


# ----------------------------------------------------------------------------------------------------------------
# the scripted expert (privileged) and an in-process fake of the protocol server
# ----------------------------------------------------------------------------------------------------------------


def topdown(psi):
    """TCP orientation pointing down (TCP +x = approach = -z) with the closing axis (TCP y) at angle psi + 90 deg."""
    c, s = math.cos(psi), math.sin(psi)
    return np.array([[0.0, -s, c], [0.0, c, s], [-1.0, 0.0, 0.0]])


def wrap(a):
    return (a + math.pi) % (2 * math.pi) - math.pi


class Expert:
    STEP_P = 0.04  # m per control step
    STEP_R = 0.35  # rad per control step

    def __init__(self, env, control_mode):
        self.env = env.unwrapped
        self.mode = control_mode
        self.phase = "pregrasp"
        self.n_in_phase = 0
        self.attempts = 0
        src = self.env.episode_source_obj
        az = math.atan2(src.p[1], src.p[0])
        sym = math.pi / 2 if abs(src.size[0] - src.size[1]) < 1e-6 else math.pi
        yaw = src.yaw()
        k = round((az - yaw) / sym)
        self.psi = wrap(yaw + k * sym)  # closing across the object's short side, wrist as natural as possible
        self.R_goal = topdown(self.psi)

    def _targets(self):
        e = self.env
        src, tgt = e.episode_source_obj, e.episode_target_obj
        if tgt.parts is not None and len(tgt.parts) > 1:  # basket: its floor is the target's top
            fc, fh = tgt.parts[0]
            t_top = (tgt.p + tgt.R @ fc)[2] + fh[2]
            clear_top = tgt.p[2] + tgt.size[2] / 2.0
            drop = 0.012
        else:
            t_top = tgt.p[2] + tgt.size[2] / 2.0
            clear_top = t_top
            drop = 0.004
        return src, tgt, t_top, clear_top, drop

    def plan_goal(self, p_c):
        src, tgt, t_top, clear_top, drop = self._targets()
        hs = src.size[2] / 2.0
        grip = 1.0
        if self.phase == "pregrasp":
            goal = np.array([src.p[0], src.p[1], src.p[2] + 0.07])
        elif self.phase == "descend":
            goal = src.p.copy()
        elif self.phase == "close":
            goal, grip = src.p.copy(), -1.0
        else:
            grip = -1.0
            off = src.p - p_c  # held: object centre relative to the TCP (constant while held)
            carry_z = max(clear_top, t_top + 2 * hs) + hs + 0.05
            if self.phase == "lift":
                goal = np.array([p_c[0], p_c[1], carry_z - off[2]])
            elif self.phase == "transfer":
                goal = np.array([tgt.p[0] - off[0], tgt.p[1] - off[1], carry_z - off[2]])
            elif self.phase == "lower":
                goal = np.array([tgt.p[0] - off[0], tgt.p[1] - off[1], t_top + hs + drop - off[2]])
            elif self.phase == "release":
                goal, grip = self.release_p, 1.0
            else:  # retreat / done
                goal, grip = self.release_p + np.array([0, 0, 0.06]), 1.0
        return goal, grip

    TOL = dict(pregrasp=0.012, descend=0.005, lift=0.02, transfer=0.012, lower=0.005, retreat=0.02)

    def act(self, msg):
        e = self.env
        Tb = S.T_from_pose7(msg["base_pose"])
        T_tcp = np.linalg.inv(Tb) @ S.T_from_pose7(msg["tcp_pose"])
        p_c, R_c = T_tcp[:3, 3], T_tcp[:3, :3]
        T_t = S.T_from_pose7(msg["target_pose"])
        p_t, R_t = T_t[:3, 3], T_t[:3, :3]
        self.n_in_phase += 1
        src = e.episode_source_obj
        # phase transitions (measured state)
        goal, _ = self.plan_goal(p_c)
        rot_err = np.linalg.norm(S.mat_to_rotvec(self.R_goal @ R_c.T))
        near = np.linalg.norm(goal - p_c) < self.TOL.get(self.phase, 0.01) and rot_err < 0.06
        if self.phase in ("pregrasp", "descend") and near:
            self._next("descend" if self.phase == "pregrasp" else "close")
        elif self.phase == "close" and self.n_in_phase > 2:
            if e.is_held(src):
                self._next("lift")
            else:
                self.attempts += 1
                self._next("pregrasp" if self.attempts < 3 else "failed")
        elif self.phase in ("lift", "transfer", "lower") and not e.is_held(src):
            self.attempts += 1
            self._next("pregrasp" if self.attempts < 3 else "failed")
        elif self.phase in ("lift", "transfer") and near:
            self._next("transfer" if self.phase == "lift" else "lower")
        elif self.phase == "lower" and near:
            self.release_p = p_c.copy()
            self._next("release")
        elif self.phase == "release" and self.n_in_phase > 2:
            self._next("retreat")
        elif self.phase == "retreat" and near:
            self._next("done")
        if self.phase in ("done", "failed"):
            hold = np.zeros(7, dtype=np.float32)
            hold[6] = 1.0
            if self.mode == S.JOINT_MODE:
                hold = np.concatenate([msg["qpos"][:6], [S.FINGER_MAX] * 2]).astype(np.float32)
            return hold, True, self.phase, f"expert {self.phase} (attempts {self.attempts + 1})"
        goal, grip = self.plan_goal(p_c)
        d = goal - p_c
        n = np.linalg.norm(d)
        p_next = p_c + (d if n <= self.STEP_P else d * (self.STEP_P / n))
        r = S.mat_to_rotvec(self.R_goal @ R_t.T)
        ang = np.linalg.norm(r)
        R_next = self.R_goal if ang <= self.STEP_R else S.rotvec_to_mat(r * (self.STEP_R / ang)) @ R_t
        if self.mode == S.DELTA_MODE:
            # docs/references.md section 5: R_d = R* R_t^T, rotvec = log R_d, dp = p* - p_c - R_d (p_t - p_c)
            R_d = R_next @ R_t.T
            dp = p_next - p_c - R_d @ (p_t - p_c)
            a = np.concatenate([dp, S.mat_to_rotvec(R_d), [grip]])
        else:
            q = e.kin.ik(S.make_T(R_next, p_next), msg["qpos"][:6])
            q = msg["qpos"][:6] if q is None else q
            f = S.FINGER_MAX if grip > 0 else S.FINGER_MIN
            a = np.concatenate([q, [f, f]])
        return a.astype(np.float32), False, "moving", f"expert {self.phase}"

    def _next(self, phase):
        self.phase, self.n_in_phase = phase, 0


METADATA = {"server": "pointact-selftest-fake", "version": "0", "protocol": 1, "pointer": "oracle",
            "control_modes": [S.DELTA_MODE, S.JOINT_MODE]}


class FakeServer:
    """Speaks the protocol like `pointact serve bridge` (one episode per instance), with the privileged expert as the
    policy. Messages and replies round-trip through openpi's msgpack encoding."""

    def __init__(self, env_holder, checks=None):
        self.env_holder = env_holder
        self.checks = checks if checks is not None else {}
        self.expert = None
        self.reset_msg = None

    def get_server_metadata(self):
        return msgpack_numpy.unpackb(msgpack_numpy.packb(METADATA))

    def handle(self, msg):
        t = msg.get("type")
        if t == "reset":
            if self.reset_msg is not None:
                raise ValueError("second reset on one connection")
            self.reset_msg = msg
            for k in ("task", "instruction", "episode_id", "control_mode", "control_freq", "max_steps"):
                if k not in msg:
                    raise ValueError(f"reset without {k}")
            self.expert = Expert(self.env_holder["env"], msg["control_mode"])
            return {"type": "ready", "episode_id": msg["episode_id"], "control_mode": msg["control_mode"]}
        if t == "infer":
            if self.expert is None:
                raise ValueError("infer before reset")
            self._validate(msg)
            a, term, status, detail = self.expert.act(msg)
            return {"type": "action", "step": msg["step"], "action": a, "terminate": term, "status": status,
                    "detail": detail}
        if t == "episode_end":
            return {"type": "ended", "episode_id": self.reset_msg["episode_id"], "success": msg["success"]}
        raise ValueError(f"unknown message type {t!r}")

    def infer(self, msg):
        msg = msgpack_numpy.unpackb(msgpack_numpy.packb(msg))
        try:
            reply = self.handle(msg)
        except Exception as e:  # the real client raises RuntimeError on a text frame
            raise RuntimeError(f"Error in inference server:\n{e}")
        return msgpack_numpy.unpackb(msgpack_numpy.packb(reply))

    def _validate(self, m):
        exp = {"rgb": (np.uint8, (480, 640, 3)), "depth": (np.float32, (480, 640)), "intrinsic_cv": (np.float64, (3, 3)),
               "extrinsic_cv": (np.float64, (4, 4)), "base_pose": (np.float64, (7,)), "tcp_pose": (np.float64, (7,)),
               "qpos": (np.float64, (8,)), "target_pose": (np.float64, (7,)), "segmentation": (np.uint32, (480, 640))}
        for k, (dt, sh) in exp.items():
            v = m.get(k)
            if not isinstance(v, np.ndarray) or v.dtype != dt or v.shape != sh:
                raise ValueError(f"infer field {k}: {type(v).__name__} {getattr(v, 'dtype', '')} {getattr(v, 'shape', '')}")
        if not isinstance(m.get("objects"), list) or {o["role"] for o in m["objects"]} != {"source", "target"}:
            raise ValueError(f"infer objects: {m.get('objects')!r}")
        if m["step"] == 0:
            self.checks.setdefault("backprojection", []).append(backprojection_error(m, self.env_holder["env"]))


def backprojection_error(m, env):
    """Lift the source object's pixels to 3-D with the message's depth/intrinsics/extrinsic/base pose; return the
    largest distance (m) of those points outside the object's box (0 = all on the box)."""
    src = next(o for o in m["objects"] if o["role"] == "source")
    v, u = np.nonzero(m["segmentation"] == src["id"])
    if len(u) == 0:
        return float("inf")
    d = m["depth"][v, u].astype(np.float64)
    K = m["intrinsic_cv"]
    pc = np.stack([(u - K[0, 2]) * d / K[0, 0], (v - K[1, 2]) * d / K[1, 1], d, np.ones_like(d)])
    T_cam_base = np.linalg.inv(m["extrinsic_cv"] @ S.T_from_pose7(m["base_pose"]))  # as SoFar's and FSD's evaluators
    pb = (T_cam_base @ pc)[:3].T
    obj = env.unwrapped.episode_source_obj
    local = (pb - obj.p) @ obj.R
    out = np.maximum(np.abs(local) - obj.size / 2.0, 0.0)
    return float(np.linalg.norm(out, axis=1).max())


def expert_factories(checks):
    holder = {}

    def env_factory(kind, task, control_mode, max_episode_steps):
        holder["env"] = run.make_env(kind, task, control_mode, max_episode_steps)
        return holder["env"]

    def policy_factory():
        return FakeServer(holder, checks)

    return env_factory, policy_factory


# ----------------------------------------------------------------------------------------------------------------
# checks
# ----------------------------------------------------------------------------------------------------------------


def check_kinematics():
    print("[1] kinematics (robot-configs/widowx250/wx250s.urdf)")
    kin = S.WidowXKinematics()
    check(kin.fixed_on_path == ["ee_arm", "gripper_bar", "ee_bar", "ee_gripper"],
          f"fixed joints on the path to ee_gripper_link: {kin.fixed_on_path}")
    T0 = kin.fk(np.zeros(6))
    check(np.allclose(T0[:3, 3], [0.458325, 0, 0.36065], atol=1e-6), f"FK(0) = {T0[:3, 3].round(6)} (URDF comment 0.458325, 0, 0.36065)")
    T = kin.fk(S.INIT_ARM_QPOS)
    p = T[:3, 3]
    check(np.all(np.isfinite(T)) and 0.2 < p[0] < 0.4 and abs(p[1]) < 0.05 and 0.05 < p[2] < 0.25,
          f"FK(initial qpos) TCP in base frame = {p.round(4)} (in front of the base, above the table)")
    check(T[2, 0] < -0.95, f"initial TCP x axis (approach) points down: {T[:3, 0].round(3)}")
    rng = np.random.default_rng(0)
    ok, n, t0 = 0, 200, time.perf_counter()
    for _ in range(n):
        # random reachable pose: FK of random joints around typical tabletop configurations
        q = np.array([rng.uniform(-1.2, 1.2), rng.uniform(-0.6, 1.0), rng.uniform(-0.9, 0.8), rng.uniform(-1.0, 1.0),
                      rng.uniform(-0.5, 1.8), rng.uniform(-2.0, 2.0)])
        Tq = kin.fk(q)
        q0 = np.clip(q + rng.normal(0, 0.15, 6), kin.lower, kin.upper)
        sol = kin.ik(Tq, q0)
        if sol is not None:
            Ts = kin.fk(sol)
            ok += np.linalg.norm(Ts[:3, 3] - Tq[:3, 3]) < 1e-3 and np.linalg.norm(S.mat_to_rotvec(Tq[:3, :3] @ Ts[:3, :3].T)) < 1e-2
    dt = (time.perf_counter() - t0) / n
    check(ok >= 0.95 * n, f"IK round trip (start 0.15 rad away): {ok}/{n} converged to < 1 mm / 0.01 rad, {dt * 1e3:.1f} ms per solve")


def check_controller():
    print("[2] stock delta controller (target = (Pose(p=cur.p) . delta . Pose(p=cur.p)^-1) . prev_target)")
    env = S.make("widowx_carrot_on_plate")
    obs, _ = env.reset(options={"obj_init_options": {"episode_id": 0}})
    rng = np.random.default_rng(1)
    worst = 0.0
    for i in range(10):
        m = run.obs_to_infer(obs, i)
        Tb = S.T_from_pose7(m["base_pose"])
        p_c = (np.linalg.inv(Tb) @ S.T_from_pose7(m["tcp_pose"]))[:3, 3]
        T_t = S.T_from_pose7(m["target_pose"])
        R_star = S.rotvec_to_mat(rng.normal(0, 0.1, 3)) @ T_t[:3, :3]
        p_star = T_t[:3, 3] + rng.normal(0, 0.015, 3)
        R_d = R_star @ T_t[:3, :3].T
        dp = p_star - p_c - R_d @ (T_t[:3, 3] - p_c)
        obs, *_ = env.step(np.concatenate([dp, S.mat_to_rotvec(R_d), [1.0]]))
        T_new = S.T_from_pose7(obs["agent"]["controller"]["arm"]["target_pose"])
        worst = max(worst, np.linalg.norm(T_new[:3, 3] - p_star), np.linalg.norm(S.mat_to_rotvec(T_new[:3, :3] @ R_star.T)))
    check(worst < 1e-6, f"the absolute-pose formula lands the next target on the desired pose (worst error {worst:.1e})")
    # gripper mapping
    check(abs(S.gripper_action_to_finger(1.0) - 0.037) < 1e-12 and abs(S.gripper_action_to_finger(-1.0) - 0.015) < 1e-12
          and abs(S.gripper_action_to_finger(0.0) - 0.026) < 1e-12, "gripper g=+1 -> 0.037 (open), 0 -> 0.026, -1 -> 0.015 (clipped 0.014)")


def render_timing():
    env = S.make("widowx_put_eggplant_in_basket")
    env.reset(options={"obj_init_options": {"episode_id": 5}})
    r = env.renderer
    t0 = time.perf_counter()
    for _ in range(10):
        r._static_key = None
        r.render(env.actors)
    full = (time.perf_counter() - t0) / 10
    t0 = time.perf_counter()
    for _ in range(10):
        r.render(env.actors, moving=env.episode_source_obj)
    inc = (time.perf_counter() - t0) / 10
    return full, inc


def quiet_main(argv, **kw):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = run.main(argv, **kw)
    return rc, buf.getvalue()


def _worker(args):
    tasks, episodes, mode, jpath = args
    checks = {}
    env_f, pol_f = expert_factories(checks)
    rc, out = quiet_main(["--env", "standin", "--server", "in-process-fake", "--tasks", ",".join(tasks), "--episodes", episodes,
                          "--control-mode", mode, "--method-name", "scripted expert", "--json", jpath],
                         policy_factory=pol_f, env_factory=env_f)
    return rc, out, checks


def check_expert(episodes, mode="delta"):
    tasks = list(run.TASK_ORDER)
    groups = [tasks[:2], tasks[2:]] if mode == "delta" else [tasks]
    tmp = tempfile.mkdtemp(prefix="standin_selftest_")
    jobs = [(g, episodes, mode, os.path.join(tmp, f"part{i}.json")) for i, g in enumerate(groups)]
    t0 = time.perf_counter()
    ctx = mp.get_context("fork")
    with ctx.Pool(len(jobs)) as pool:
        outs = pool.map(_worker, jobs)
    wall = time.perf_counter() - t0
    results, bp = [], []
    for (rc, out, checks), job in zip(outs, jobs):
        if rc != 0:
            print(out)
        check(rc == 0, f"run.main exit status 0 for {','.join(job[0])} ({mode})")
        with open(job[3]) as f:
            results += json.load(f)["episodes"]
        bp += checks.get("backprojection", [])
        for line in out.splitlines():
            if " ep " in line and "success=" in line:
                print("   " + line)
    return results, bp, wall


class WSServer:
    """A local WebSocket server speaking the protocol with the expert (or answering errors), for the real client."""

    def __init__(self, holder, mode="ok"):
        from websockets.sync.server import serve

        self.holder, self.mode = holder, mode
        self.server = serve(self._handler, "127.0.0.1", 0, compression=None, max_size=None)
        self.port = self.server.socket.getsockname()[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _handler(self, ws):
        fake = FakeServer(self.holder)
        ws.send(msgpack_numpy.packb(METADATA))
        for data in ws:
            msg = msgpack_numpy.unpackb(data)
            if self.mode == "error" and msg.get("type") == "infer" and msg.get("step") == 3:
                ws.send("pointact: simulated error at step 3")  # text frame = error
                continue
            try:
                reply = fake.handle(msg)
            except Exception as e:
                ws.send(f"error: {e}")
                continue
            ws.send(msgpack_numpy.packb(reply))

    def close(self):
        self.server.shutdown()


def check_websocket():
    print("[5] real WebSocket path (openpi WebsocketClientPolicy <-> local protocol server)")
    holder = {}

    def env_factory(kind, task, control_mode, max_episode_steps):
        holder["env"] = run.make_env(kind, task, control_mode, max_episode_steps)
        return holder["env"]

    srv = WSServer(holder)
    t0 = time.perf_counter()
    rc, out = quiet_main(["--env", "standin", "--server", f"127.0.0.1:{srv.port}", "--tasks", "widowx_carrot_on_plate",
                          "--episodes", "0,1"], env_factory=env_factory)
    srv.close()
    ok_lines = [ln for ln in out.splitlines() if "success=1" in ln]
    check(rc == 0 and len(ok_lines) == 2, f"2 carrot episodes over ws://127.0.0.1:{srv.port}: rc={rc}, "
          f"{len(ok_lines)}/2 succeeded, {time.perf_counter() - t0:.1f} s")
    if rc != 0:
        print(out)
    check("| pointact (oracle) [stand-in, not SimplerEnv] |" in out, "method row labelled from the server metadata pointer + stand-in tag")
    srv = WSServer(holder, mode="error")
    rc, out = quiet_main(["--env", "standin", "--server", f"127.0.0.1:{srv.port}", "--tasks", "widowx_stack_cube",
                          "--episodes", "0"], env_factory=env_factory)
    srv.close()
    check(rc != 0 and "simulated error at step 3" in out, f"server error (text frame) -> exit status {rc} with the server's message")
    rc, out = quiet_main(["--env", "standin", "--server", "127.0.0.1:9", "--tasks", "widowx_stack_cube", "--episodes", "0"])
    check(rc != 0 and "cannot reach the policy server" in out, f"unreachable server -> exit status {rc} with a clear message")


def main():
    ap = argparse.ArgumentParser(description="stand-in + run.py self-test (env: stand-in (not SimplerEnv))")
    ap.add_argument("--quick", action="store_true", help="3 episodes per task instead of 24")
    args = ap.parse_args()
    t_start = time.perf_counter()
    print(f"== standin_selftest == {S.BANNER}")
    check_kinematics()
    check_controller()
    full, inc = render_timing()
    print(f"[3] render 640x480 rgb+depth+segmentation: {full * 1e3:.1f} ms full scene, {inc * 1e3:.1f} ms per step "
          "(static layer cached, held object re-cast)")
    check(full < 0.15, "full render under 0.15 s")

    episodes = "0-2" if args.quick else "0-23"
    print(f"[4] scripted expert through run.main, official budgets, episodes {episodes}  ({S.BANNER})")
    results, bp, wall = check_expert(episodes)
    check(len(bp) == len(results) and max(bp) < 0.003,
          f"[3] infer message back-projects the source pixels onto the source box (worst {max(bp) * 1e3:.2f} mm, {len(bp)} episodes)")
    per = run.summarize(results)
    print()
    print(f"scripted expert on the stand-in — {S.BANNER}; {len(results)} episodes in {wall:.1f} s")
    for ln in run.table_lines("scripted expert (privileged) [stand-in]", per, include_published=False):
        print(ln)
    print('success rule: final-step info["success"], the official SimplerEnv rule; step budget: official (60; eggplant 120)')
    steps_needed = [r["server_terminate_step"] for r in results if r["server_terminate_step"] is not None]
    if steps_needed:
        print(f"expert finished its plan after {min(steps_needed)}..{max(steps_needed)} steps (median {int(np.median(steps_needed))})")
    for t in run.TASK_ORDER:
        check(per[t]["success"] >= 75.0, f"{run.TASKS[t]['column']}: expert success {per[t]['success']:.1f}% >= 75% within the official budget")
    fails = [f"{r['task']}#{r['episode_id']}({r['server_detail']})" for r in results if not r["success"]]
    if fails:
        print("  failed episodes: " + ", ".join(fails))

    print("[6] joint control mode (8-D arm_pd_joint_pos_gripper_pd_joint_pos), episodes 0-1")
    jres, _, _ = check_expert("0-1", mode="joint")
    jper = run.summarize(jres)
    check(all(jper[t]["success"] >= 50.0 for t in run.TASK_ORDER),
          "joint mode: " + ", ".join(f"{run.TASKS[t]['column']} {jper[t]['success']:.0f}%" for t in run.TASK_ORDER))

    check_websocket()
    print()
    print(f"{S.BANNER}; self-test took {time.perf_counter() - t_start:.1f} s; "
          + ("ALL CHECKS PASSED" if not FAILS else f"{len(FAILS)} CHECK(S) FAILED"))
    return 0 if not FAILS else 1


if __name__ == "__main__":
    sys.exit(main())
