#!/usr/bin/env python3
"""The ManiSkill3 adapter checked without ManiSkill3, on a recorded observation.

    python3 sim/simplerenv/maniskill3_selftest.py [--fixture tests/fixtures/maniskill3_obs.npz]

Needs numpy only (what run.py imports at its top; `tests/simplerenv_maniskill3.rs` runs it with POINTACT_PYTHON). The
fixture is one reset of a ManiSkill3 Bridge env recorded by record_maniskill3_obs.py (its docstring lists the arrays).
This script

1. rebuilds from the recorded raw pieces the ManiSkill3 observation dict maniskill3.py's `simplerenv_obs` reads
   (batch axis of one, ManiSkill3's dtypes), runs `simplerenv_obs`, then run.py's `scene_objects` (source / target ids
   as the adapter's `SceneObject`s) and `obs_to_infer` (step 0), as run.py does for `--env maniskill3`;
2. compares the message field by field with the recorded one: the same fields; int and string fields and the objects
   exactly; arrays by dtype and shape, then integer arrays exactly and float arrays within 1e-6 relative; rgb, depth
   and segmentation (recorded as dtype, shape and SHA-256) bit for bit. Every mismatching field is named;
3. checks that the message makes physical sense: the source and target roles are listed with the recorded actor ids
   and both ids are in the segmentation; the depth is finite and > 0 on every source pixel; every source (and target)
   pixel, back-projected with the message's depth, intrinsic_cv and extrinsic_cv (world -> OpenCV camera), lies within
   1 cm of that actor's collision-mesh box at its recorded world pose, and the source's pixels are not on the target's
   box;
4. when all that holds, checks that these checks catch faults: a changed target_pose and a changed segmentation
   pixel are named as mismatches, and a depth 10 % too far fails the back-projection.

Exit status 0 when all hold ("PASS: ..."), 1 otherwise (each failure on a "FAIL: ..." line).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import maniskill3  # noqa: E402  (this folder's maniskill3.py; numpy only until an env is made)
import run  # noqa: E402  (this folder's run.py)
from poses import quat_to_mat  # noqa: E402
from record_maniskill3_obs import DIGESTED, planes_to_z  # noqa: E402  (numpy only at import)

CAMERA = maniskill3.CAMERA
DEFAULT_FIXTURE = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "fixtures", "maniskill3_obs.npz"))
RTOL = 1e-6
BOX_TOL_M = 0.01  # back-projected pixels: at most this far outside the actor's collision box
MIN_PIXELS = 50  # each role's actor must cover at least this many pixels


def load(path):
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def observation(fx):
    """The ManiSkill3 observation dict and the other pieces simplerenv_obs reads, from the recorded arrays."""
    obs = {
        "sensor_data": {CAMERA: {"rgb": fx["raw_rgb"], "segmentation": fx["raw_segmentation"]}},
        "sensor_param": {CAMERA: {k: fx["raw_" + k] for k in ("intrinsic_cv", "extrinsic_cv", "cam2world_gl")}},
        "agent": {"qpos": fx["raw_qpos"], "qvel": fx["raw_qvel"],
                  "controller": {"arm": {"target_pose": fx["raw_target_pose"]}}},
    }
    return obs, planes_to_z(fx["raw_position_z_planes"]), fx["raw_base_pose"], fx["raw_tcp_pose"]


def message(fx):
    """What run.py sends for the recorded observation: maniskill3.simplerenv_obs, scene_objects, obs_to_infer."""
    sim_obs = maniskill3.simplerenv_obs(*observation(fx))
    env = types.SimpleNamespace(**{
        f"episode_{role}_obj": maniskill3.SceneObject(int(fx[f"{role}_id"]), str(fx[f"{role}_name"]))
        for role in ("source", "target")})
    objects = run.scene_objects(env, str(fx["task"]))
    return run.obs_to_infer(sim_obs, int(fx["msg_step"]), objects)


def compare(msg, fx):
    """The mismatches between a message and the recorded one, one string per field."""
    bad = []
    want_keys = [str(k) for k in fx["msg_keys"]]
    if list(msg) != want_keys:
        bad.append(f"fields: got {list(msg)}, recorded {want_keys}")
    for k in want_keys:
        if k not in msg:
            continue
        v = msg[k]
        if k == "objects":
            got = [(o["id"], o["name"], o["role"]) for o in v]
            want = [(int(i), str(n), str(r)) for i, n, r in
                    zip(fx["msg_objects_id"], fx["msg_objects_name"], fx["msg_objects_role"])]
            if got != want:
                bad.append(f"objects: got {got}, recorded {want}")
            if any(type(x) is not t for o in got for x, t in zip(o, (int, str, str))):
                bad.append(f"objects: values are not plain Python int / str: {v}")
        elif k in DIGESTED:
            if not isinstance(v, np.ndarray):
                bad.append(f"{k}: not a numpy array but {type(v).__name__}")
                continue
            want_dtype, want_shape = str(fx[f"msg_{k}_dtype"]), tuple(int(n) for n in fx[f"msg_{k}_shape"])
            if v.dtype.str != want_dtype or v.shape != want_shape:
                bad.append(f"{k}: dtype {v.dtype.str} shape {v.shape}, recorded {want_dtype} {want_shape}")
            elif hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest() != str(fx[f"msg_{k}_sha256"]):
                bad.append(f"{k}: values differ from the recorded ones (SHA-256 of the bytes)")
            if not v.flags.c_contiguous:
                bad.append(f"{k}: not C-contiguous")
        else:
            want = fx.get(f"msg_{k}")
            if want is None:
                bad.append(f"{k}: not in the recording")
            elif want.dtype.kind == "U":
                if not isinstance(v, str) or v != str(want):
                    bad.append(f"{k}: got {v!r}, recorded {str(want)!r}")
            elif want.ndim == 0:
                if type(v) is not int or v != int(want):
                    bad.append(f"{k}: got {v!r} ({type(v).__name__}), recorded {int(want)} (a plain int)")
            elif not isinstance(v, np.ndarray):
                bad.append(f"{k}: not a numpy array but {type(v).__name__}")
            elif v.dtype != want.dtype or v.shape != want.shape:
                bad.append(f"{k}: dtype {v.dtype} shape {v.shape}, recorded {want.dtype} {want.shape}")
            elif want.dtype.kind in "iub":
                if not np.array_equal(v, want):
                    bad.append(f"{k}: {int(np.sum(v != want))} values differ")
            else:
                err = np.abs(v.astype(np.float64) - want) - RTOL * np.abs(want)
                if not np.all(np.isfinite(v)) or np.any(err > 0):
                    i = int(np.argmax(err))
                    bad.append(f"{k}: differs beyond {RTOL} relative (index {np.unravel_index(i, v.shape)}: got "
                               f"{v.reshape(-1)[i]!r}, recorded {want.reshape(-1)[i]!r})")
    return bad


def back_project(msg, ident):
    """World points (N, 3) of the pixels whose segmentation id is `ident`, and their depths."""
    seg, depth = msg["segmentation"], msg["depth"].astype(np.float64)
    K, E = msg["intrinsic_cv"], msg["extrinsic_cv"]
    v, u = np.nonzero(seg == ident)
    z = depth[v, u]
    pc = np.stack([(u - K[0, 2]) * z / K[0, 0], (v - K[1, 2]) * z / K[1, 1], z, np.ones_like(z)], axis=1)
    return (np.linalg.inv(E) @ pc.T).T[:, :3], z


def outside_box(points, fx, role):
    """Distance (m) of each world point to the role actor's collision-mesh box (actor frame) at its recorded pose."""
    pose = fx[f"{role}_pose"]
    local = (points - pose[:3]) @ quat_to_mat(pose[3:7])
    lo, hi = fx[f"{role}_bounds"]
    return np.linalg.norm(np.maximum(lo - local, 0) + np.maximum(local - hi, 0), axis=1)


def physical(msg, fx, report=None):
    """The physical-sense failures of a message (report: a list that gets one line per measurement)."""
    bad = []
    report = report if report is not None else []
    roles = {o["role"]: o for o in msg.get("objects", [])}
    seg = msg["segmentation"]
    for role in ("source", "target"):
        o = roles.get(role)
        if o is None:
            bad.append(f"objects: no {role} role")
            continue
        if o["id"] != int(fx[f"{role}_id"]):
            bad.append(f"objects: {role} id {o['id']}, the recorded {role} actor has id {int(fx[f'{role}_id'])}")
        n = int(np.sum(seg == o["id"]))
        if n < MIN_PIXELS:
            bad.append(f"segmentation: {role} id {o['id']} covers {n} pixels (< {MIN_PIXELS})")
            continue
        pw, z = back_project(msg, o["id"])
        if not (np.all(np.isfinite(z)) and np.all(z > 0)):
            bad.append(f"depth: {int(np.sum(~(z > 0)))} of {n} {role} pixels have no positive finite depth")
            continue
        d = outside_box(pw, fx, role)
        c = float(np.linalg.norm(pw.mean(axis=0) - fx[f"{role}_pose"][:3]))
        report.append(f"{role} {o['name']} (id {o['id']}, {fx[f'{role}_name']}): {n} px, depth "
                      f"{z.min():.3f}..{z.max():.3f} m, back-projected: outside its collision box max "
                      f"{d.max() * 1000:.2f} mm (p95 {np.percentile(d, 95) * 1000:.2f} mm), centroid "
                      f"{c * 100:.1f} cm from the actor origin")
        if d.max() > BOX_TOL_M:
            bad.append(f"back-projection: {int(np.sum(d > BOX_TOL_M))} of {n} {role} pixels lie more than "
                       f"{BOX_TOL_M * 100:.0f} cm outside its collision box (max {d.max() * 1000:.1f} mm)")
        if role == "source":
            other = outside_box(pw, fx, "target")
            report.append(f"source pixels against the target's box: median {np.median(other) * 1000:.1f} mm outside")
            if np.median(other) <= BOX_TOL_M:
                bad.append("back-projection: the source's pixels lie on the target's box too (the check cannot tell "
                           "the objects apart)")
    return bad


def faults_caught(msg, fx):
    """The checks must catch a wrong pose, a wrong segmentation pixel and a wrong depth scale."""
    missed = []
    m = dict(msg, target_pose=msg["target_pose"] + np.array([0, 0, 1e-4, 0, 0, 0, 0]))
    if not any(b.startswith("target_pose:") for b in compare(m, fx)):
        missed.append("a target_pose 0.1 mm off")
    seg = msg["segmentation"].copy()
    seg[0, 0] += 1
    if not any(b.startswith("segmentation:") for b in compare(dict(msg, segmentation=seg), fx)):
        missed.append("one segmentation pixel changed")
    if not any(b.startswith("back-projection:") for b in physical(dict(msg, depth=msg["depth"] * 1.1), fx)):
        missed.append("a depth 10 % too far")
    return missed


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fixture", default=DEFAULT_FIXTURE, help="the recorded .npz (default: "
                                                              "tests/fixtures/maniskill3_obs.npz)")
    args = p.parse_args(argv)
    try:
        fx = load(args.fixture)
    except (OSError, ValueError) as e:
        print(f"FAIL: cannot read the fixture {args.fixture}: {e}")
        return 1
    need = ["task", "env_id", "episode_id", "mani_skill_version", "stand_ins", "msg_keys", "msg_step"]
    need += [f"{r}_{k}" for r in ("source", "target") for k in ("id", "name", "pose", "bounds")]
    need += ["raw_" + k for k in ("rgb", "segmentation", "position_z_planes", "intrinsic_cv", "extrinsic_cv",
                                  "cam2world_gl", "qpos", "qvel", "target_pose", "base_pose", "tcp_pose")]
    missing = [k for k in need if k not in fx]
    if missing:
        print(f"FAIL: the fixture {args.fixture} lacks {', '.join(missing)} (record it again with "
              "record_maniskill3_obs.py)")
        return 1
    what = (f"{fx['task']} ({fx['env_id']}, ManiSkill3 {fx['mani_skill_version']}) episode {int(fx['episode_id'])}"
            + (f", stand-ins: {fx['stand_ins']}" if str(fx["stand_ins"]) else ""))
    print(f"fixture: {os.path.basename(args.fixture)}: {what}; {len(fx)} arrays")
    try:
        msg = message(fx)
    except Exception as e:  # the adapter or obs_to_infer refused the recorded observation
        print(f"FAIL: the adapter / obs_to_infer raised {type(e).__name__}: {e}")
        return 1
    fails = [f"message field {b}" for b in compare(msg, fx)]
    report = []
    fails += [f"physical: {b}" for b in physical(msg, fx, report)]
    for line in report:
        print(f"  {line}")
    if not fails:  # on a message that passes, a fault must not pass
        fails += [f"the checks missed {m}" for m in faults_caught(msg, fx)]
    for f in fails:
        print(f"FAIL: {f}")
    if fails:
        print(f"FAIL: {len(fails)} problem(s) with the ManiSkill3 adapter on {what}")
        return 1
    print(f"PASS: maniskill3.simplerenv_obs + run.obs_to_infer rebuild the recorded message ({len(msg)} fields, "
          f"rgb/depth/segmentation bit for bit, floats within {RTOL} relative) and it makes physical sense; "
          "the checks catch a changed pose, segmentation and depth scale")
    return 0


if __name__ == "__main__":
    sys.exit(main())
