#!/usr/bin/env python3
"""Records one ManiSkill3 Bridge observation for maniskill3_selftest.py, which checks the adapter without ManiSkill3.

    MS_ASSET_DIR=~/.cache/pointact/maniskill3/assets ~/.cache/pointact/maniskill3/venv/bin/python \\
        sim/simplerenv/record_maniskill3_obs.py [--task widowx_carrot_on_plate] [--episode 0] [--out FILE]

Run it with the venv of setup.sh (mani-skill 3.0.1). It makes the task's env through maniskill3.py, resets it to the
episode (as run.py does) and writes, with numpy.savez_compressed, arrays only (np.load(..., allow_pickle=False) reads
them), to tests/fixtures/maniskill3_obs.npz by default:

* `raw_*`: the pieces the adapter's `simplerenv_obs` read from ManiSkill3 at that reset, as ManiSkill3 gave them
  (batch axis of one, ManiSkill3's dtypes): rgb, segmentation, intrinsic_cv, extrinsic_cv, cam2world_gl, qpos, qvel,
  controller target_pose, the robot's root pose (base_pose) and the ee_gripper_link pose (tcp_pose). The camera's
  Position texture is kept as its z channel only (all the adapter reads of it), at full resolution, lossless:
  `raw_position_z_planes` (4, H, W) uint8 = the little-endian bytes of the float32 z values (1, H, W), byte k of every
  pixel in plane k, which deflate compresses to a third of the plain float32 array. Nothing is cropped or downsampled.
* `source_*` / `target_*`: the task actors' names and segmentation ids (`per_scene_id`), their world poses
  ([p, q wxyz]) and the bounds (2, 3) of their collision meshes in the actor frame, for the physical checks.
* `msg_*`: the protocol message run.py sends for that observation (maniskill3.py's conversion, then run.py's
  `obs_to_infer` with step 0 and `scene_objects`): `msg_keys` lists its fields. Every field is stored as it is, except
  rgb, depth and segmentation, which are stored as their dtype, shape and the SHA-256 of their bytes
  (`msg_<field>_dtype`, `_shape`, `_sha256`), since they would double the file.
* `task`, `env_id`, `episode_id`, `instruction`, `mani_skill_version`, `stand_ins` (the stand-in asset files in use,
  comma separated; empty with the real stages).

Before writing, it checks that `simplerenv_obs` on the recorded pieces (decoded as the self-test decodes them) gives
exactly the observation the adapter gave, so the file holds all the adapter read.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import maniskill3  # noqa: E402  (this folder's maniskill3.py)
import run  # noqa: E402  (this folder's run.py)

CAMERA = maniskill3.CAMERA
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "fixtures", "maniskill3_obs.npz"))
# message fields stored as dtype + shape + SHA-256 of the bytes
DIGESTED = ("rgb", "depth", "segmentation")


def z_to_planes(z):
    """float32 (1, H, W) -> uint8 (4, H, W): plane k = byte k (little-endian) of every value."""
    z = np.ascontiguousarray(np.asarray(z, dtype="<f4"))
    if z.ndim != 3 or z.shape[0] != 1:
        raise ValueError(f"Position z: expected (1, H, W), got {z.shape}")
    return np.ascontiguousarray(z[0].view(np.uint8).reshape(z.shape[1:] + (4,)).transpose(2, 0, 1))


def planes_to_z(planes):
    """The inverse of z_to_planes: uint8 (4, H, W) -> float32 (1, H, W)."""
    planes = np.asarray(planes, dtype=np.uint8)
    return np.ascontiguousarray(planes.transpose(1, 2, 0)).view("<f4")[..., 0][None].astype(np.float32)


def sha256(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def equal_obs(a, b, path=""):
    """Names of the leaves that differ between two nested obs dicts (dtype, shape or a bit of a value)."""
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)) or set(a) != set(b):
            return [path or "/"]
        return [d for k in a for d in equal_obs(a[k], b[k], f"{path}/{k}")]
    a, b = np.asarray(a), np.asarray(b)
    same = a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return [] if same else [path]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="widowx_carrot_on_plate", choices=list(maniskill3.TASK_IDS))
    p.add_argument("--episode", type=int, default=0)
    p.add_argument("--out", default=DEFAULT_OUT, help="the .npz to write (default tests/fixtures/maniskill3_obs.npz)")
    p.add_argument("--assets", default=None, help="MS_ASSET_DIR (default: $MS_ASSET_DIR or "
                                                  "~/.cache/pointact/maniskill3/assets)")
    args = p.parse_args(argv)

    env = maniskill3.make(args.task, asset_dir=args.assets)
    seen = {}
    live_obs = env._obs

    def spy(o):  # what the adapter reads at the reset
        seen["obs"] = o
        seen["pieces"] = env.raw_pieces()
        return live_obs(o)

    env._obs = spy
    obs, _info = env.reset(options={"obj_init_options": {"episode_id": args.episode}})
    env._obs = live_obs
    objects = run.scene_objects(env, args.task)
    msg = run.obs_to_infer(obs, 0, objects)

    o, (pos_z, base_pose, tcp_pose) = seen["obs"], seen["pieces"]
    sd, sp, ag = o["sensor_data"][CAMERA], o["sensor_param"][CAMERA], o["agent"]
    n = maniskill3._np
    raw = {
        "raw_rgb": n(sd["rgb"]),
        "raw_segmentation": n(sd["segmentation"]),
        "raw_position_z_planes": z_to_planes(pos_z),
        "raw_intrinsic_cv": n(sp["intrinsic_cv"]),
        "raw_extrinsic_cv": n(sp["extrinsic_cv"]),
        "raw_cam2world_gl": n(sp["cam2world_gl"]),
        "raw_qpos": n(ag["qpos"]),
        "raw_qvel": n(ag["qvel"]),
        "raw_target_pose": n(ag["controller"]["arm"]["target_pose"]),
        "raw_base_pose": n(base_pose),
        "raw_tcp_pose": n(tcp_pose),
    }
    raw = {k: np.ascontiguousarray(v) for k, v in raw.items()}

    # the recorded pieces, decoded, must give exactly what the adapter gave
    rebuilt = {
        "sensor_data": {CAMERA: {"rgb": raw["raw_rgb"], "segmentation": raw["raw_segmentation"]}},
        "sensor_param": {CAMERA: {k: raw["raw_" + k] for k in ("intrinsic_cv", "extrinsic_cv", "cam2world_gl")}},
        "agent": {"qpos": raw["raw_qpos"], "qvel": raw["raw_qvel"],
                  "controller": {"arm": {"target_pose": raw["raw_target_pose"]}}},
    }
    again = maniskill3.simplerenv_obs(rebuilt, planes_to_z(raw["raw_position_z_planes"]), raw["raw_base_pose"],
                                      raw["raw_tcp_pose"])
    diff = equal_obs(again, obs)
    if diff:
        raise SystemExit(f"error: the recorded pieces do not rebuild the adapter's observation: {diff}")

    out = dict(raw)
    out["task"] = np.array(args.task)
    out["env_id"] = np.array(env.env_id)
    out["episode_id"] = np.array(args.episode, dtype=np.int64)
    out["instruction"] = np.array(str(env.get_language_instruction()))
    import mani_skill

    out["mani_skill_version"] = np.array(str(getattr(mani_skill, "__version__", maniskill3.MANISKILL_VERSION)))
    out["stand_ins"] = np.array(",".join(env.stand_ins))
    for role in ("source", "target"):
        obj = getattr(env, f"episode_{role}_obj")
        actor = env.u.objs[obj.name]
        mesh = actor.get_first_collision_mesh(to_world_frame=False)
        out[f"{role}_name"] = np.array(obj.name)
        out[f"{role}_id"] = np.array(obj.id, dtype=np.int64)
        out[f"{role}_pose"] = n(actor.pose.raw_pose)[0].astype(np.float64)
        out[f"{role}_bounds"] = np.asarray(mesh.bounds, dtype=np.float64)

    out["msg_keys"] = np.array(list(msg))
    for k, v in msg.items():
        if k == "objects":
            out["msg_objects_id"] = np.array([x["id"] for x in v], dtype=np.int64)
            out["msg_objects_name"] = np.array([x["name"] for x in v])
            out["msg_objects_role"] = np.array([x["role"] for x in v])
        elif k in DIGESTED:
            out[f"msg_{k}_dtype"] = np.array(v.dtype.str)
            out[f"msg_{k}_shape"] = np.array(v.shape, dtype=np.int64)
            out[f"msg_{k}_sha256"] = np.array(sha256(v))
        elif isinstance(v, np.ndarray):
            out[f"msg_{k}"] = v
        elif isinstance(v, str):
            out[f"msg_{k}"] = np.array(v)
        elif isinstance(v, int):
            out[f"msg_{k}"] = np.array(v, dtype=np.int64)
        else:
            raise SystemExit(f"error: message field {k!r} has a type this recorder does not store: {type(v)}")
    env.close()

    for k, v in out.items():
        if v.dtype == object:
            raise SystemExit(f"error: {k} would need a pickle")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    np.savez_compressed(args.out, **out)
    with np.load(args.out, allow_pickle=False) as f:
        back = {k: f[k] for k in f.files}
    bad = [k for k in out if back[k].dtype != out[k].dtype or back[k].tobytes() != out[k].tobytes()]
    if bad:
        raise SystemExit(f"error: {args.out} does not read back: {bad}")
    print(f"wrote {args.out}: {os.path.getsize(args.out)} bytes, {len(out)} arrays; {args.task} ({env.env_id}) "
          f"episode {args.episode}; source {out['source_name']} id {out['source_id']}, target {out['target_name']} "
          f"id {out['target_id']}" + (f"; stand-ins: {out['stand_ins']}" if env.stand_ins else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
