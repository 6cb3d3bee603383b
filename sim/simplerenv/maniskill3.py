#!/usr/bin/env python3
"""ManiSkill3's Bridge digital twins (SimplerEnv's four WidowX tasks) as an environment for `run.py --env maniskill3`.

    python3 sim/simplerenv/run.py --server 127.0.0.1:8000 --env maniskill3 --tasks widowx_carrot_on_plate
    python3 sim/simplerenv/maniskill3.py check --task widowx_carrot_on_plate     # reset, step, render, depth check
    python3 sim/simplerenv/maniskill3.py write-stand-in-table --assets DIR        # (setup.sh --stand-in-table)

Run it with the venv that sim/simplerenv/setup.sh makes (mani-skill 3.0.1, sapien 3.0.3, gymnasium, torch). The
adapter turns ManiSkill3 observations into the SimplerEnv observation layout that run.py's `obs_to_infer` reads, so the
server gets the same protocol message as for `--env simplerenv` / `--env standin`:

* rgb: `sensor_data/3rd_view_camera/rgb` (green-screened with the real Bridge photo, as upstream).
* depth: NOT an observation of these envs (their only obs mode is "rgb+segmentation"). It is read from the same
  camera's "Position" texture of the same render (sapien's default shader: camera-frame OpenGL xyz in metres, float32),
  z-depth = -Position.z; pixels with segmentation id 0 (nothing hit) get depth 0. `check` verifies it: the source
  object's pixels, back-projected with intrinsic_cv / extrinsic_cv, lie on its collision mesh at the actor pose.
* segmentation: `sensor_data/3rd_view_camera/segmentation` = per-scene actor/link ids; source/target ids are the
  task actors' `per_scene_id`.
* camera matrices from `sensor_param/3rd_view_camera`; base_pose = the robot's root pose, tcp_pose = the
  `ee_gripper_link` pose (world), qpos, target_pose = `agent/controller/arm/target_pose` (base frame).
* `simplerenv_obs` is that conversion, numpy only (this module imports nothing of ManiSkill3 until an env is made):
  maniskill3_selftest.py runs it and obs_to_infer without ManiSkill3 on an observation that
  record_maniskill3_obs.py recorded (tests/fixtures/maniskill3_obs.npz).

Actions: the protocol's 7-D delta action has SimplerEnv's (ManiSkill2_real2sim) semantics: axis-angle rotation, and
"align2" frame: target <- (Pose(p=cur.p) . Pose(dp, exp(r)) . Pose(p=cur.p)^-1) . target. ManiSkill3 3.0.1's
controller of the same name differs [haosulab/ManiSkill tag v3.0.1,
mani_skill/agents/controllers/pd_ee_pose.py, PDEEPoseController.compute_target_pose, frame
"root_translation:root_aligned_body_rotation"]: p <- target.p + dp, q <- euler_XYZ(r) . target.q. The adapter converts
each action exactly (same resulting target pose): e = euler_XYZ^-1(exp(r)), dp' = dp + (exp(r) - I)(target.p - cur.p).
`convert_actions=False` passes actions through unchanged (what SimplerEnv's real2sim_eval_maniskill3.py does with its
VLA outputs).

Sources: haosulab/ManiSkill tag v3.0.1 (pip mani-skill==3.0.1) mani_skill/envs/tasks/digital_twins/bridge_dataset_eval/
{base_env.py,put_on_in_scene.py}; simpler-env/SimplerEnv branch maniskill3 (commit 52a5088)
simpler_env/real2sim_eval_maniskill3.py (obs_mode "rgb+segmentation", sensor_configs shader_pack "default",
reset(seed=k, options={"episode_id": k}), run until the TimeLimit truncates, success = info["success"] at the end).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from poses import quat_to_mat  # noqa: E402  (this folder's poses.py)

CAMERA = "3rd_view_camera"
DELTA_MODE = "arm_pd_ee_target_delta_pose_align2_gripper_pd_joint_pos"
MANISKILL_VERSION = "3.0.1"

# run.py task name -> ManiSkill3 env id [bridge_dataset_eval/put_on_in_scene.py]
TASK_IDS = {
    "widowx_spoon_on_towel": "PutSpoonOnTableClothInScene-v1",
    "widowx_carrot_on_plate": "PutCarrotOnPlateInScene-v1",
    "widowx_stack_cube": "StackGreenCubeOnYellowCubeBakedTexInScene-v1",
    "widowx_put_eggplant_in_basket": "PutEggplantInBasketScene-v1",
}
# ManiSkill3 asset layout: $MS_ASSET_DIR/data/<target_path> [mani_skill/__init__.py ASSET_DIR,
# mani_skill/utils/assets/data.py DATA_SOURCES "bridge_v2_real2sim" and "widowx250s"]
BRIDGE_REL = os.path.join("data", "tasks", "bridge_v2_real2sim_dataset")
WIDOWX_REL = os.path.join("data", "robots", "widowx")
STAGE_FLAT = "bridge_table_1_v1.glb"   # flat-table scene (spoon, carrot, cubes)
STAGE_SINK = "bridge_table_1_v2.glb"   # sink scene (eggplant)
STAND_IN_SUFFIX = ".STAND_IN.txt"  # sidecar next to each stand-in file, saying what it is
STAND_IN_LABEL = "stand-in table — not official SimplerEnv numbers"
# task -> files (relative to the bridge dataset folder) that gym.make / reset load
TASK_FILES = {
    "widowx_spoon_on_towel": ["stages/" + STAGE_FLAT, "real_inpainting/bridge_real_eval_1.png",
                              "custom/models/bridge_spoon_generated_modified/textured.dae",
                              "custom/models/table_cloth_generated_shorter/textured.dae"],
    "widowx_carrot_on_plate": ["stages/" + STAGE_FLAT, "real_inpainting/bridge_real_eval_1.png",
                               "custom/models/bridge_carrot_generated_modified/textured.dae",
                               "custom/models/bridge_plate_objaverse_larger/textured.dae"],
    "widowx_stack_cube": ["stages/" + STAGE_FLAT, "real_inpainting/bridge_real_eval_1.png",
                          "custom/models/baked_green_cube_3cm/textured.dae",
                          "custom/models/baked_yellow_cube_3cm/textured.dae"],
    "widowx_put_eggplant_in_basket": ["stages/" + STAGE_SINK, "real_inpainting/bridge_sink.png",
                                      ("custom/models/eggplant/textured.dae", "custom/models/eggplant/textured.glb"),
                                      "custom/models/sink/textured.dae",
                                      "custom/models/dummy_sink_target_plane/textured.dae"],
}

# The flat collision boxes that stand in for the missing stages. The stage is loaded with pose
# Pose(p=-scene_offset) . Pose(q=[0.707, 0.707, 0, 0]) (a +90 deg turn about x: glTF y-up -> z-up)
# [bridge_dataset_eval/base_env.py BaseBridgeEnv._load_scene], so the mesh is written in the file's frame.
# Top at world z = 0.87: SimplerEnv's scene_table_height default and the robot's base height on the flat table
# [simpler-env/ManiSkill2_real2sim commit ef7a4d4, mani_skill2_real2sim/envs/custom_scenes/base_env.py].
# The sink scene's box: top at z = 0.85, the robot's base height there [bridge_dataset_eval/base_env.py]; its objects
# rest in the kinematic `sink` actor (the basin and the dish rack that holds the target plane), above the box.
STAND_IN_BOX_WORLD = ((-0.9, -0.8, 0.77), (0.7, 0.8, 0.87))
STAND_IN_SINK_BOX_WORLD = ((-0.9, -0.8, 0.75), (0.7, 0.8, 0.85))
# The eggplant's visual mesh (textured.dae) is missing too: the stand-in is its collision mesh in one colour, written as
# textured.glb, which the loader takes only when textured.dae is absent [BaseBridgeEnv._build_actor_helper].
EGGPLANT_RGBA = (95, 45, 120, 255)
STAGE_OFFSET = (2.0634, 2.8313, 0.0)


def default_asset_dir():
    return os.environ.get("MS_ASSET_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "pointact",
                                                          "maniskill3", "assets")


# task -> files that may be stand-ins, each with the real file that overrides it (None: the file itself)
STAND_IN_FILES = {
    "widowx_spoon_on_towel": [("stages/" + STAGE_FLAT, None)],
    "widowx_carrot_on_plate": [("stages/" + STAGE_FLAT, None)],
    "widowx_stack_cube": [("stages/" + STAGE_FLAT, None)],
    "widowx_put_eggplant_in_basket": [("stages/" + STAGE_SINK, None),
                                      ("custom/models/eggplant/textured.glb", "custom/models/eggplant/textured.dae")],
}


def stand_ins(asset_dir=None, tasks=None):
    """The stand-in files in use for these tasks (all tasks when None), relative to the bridge dataset folder."""
    base = os.path.join(asset_dir or default_asset_dir(), BRIDGE_REL)
    out = []
    for task in tasks or list(TASK_IDS):
        for f, real in STAND_IN_FILES[task]:
            if (os.path.exists(os.path.join(base, f + STAND_IN_SUFFIX)) and f not in out
                    and not (real and os.path.exists(os.path.join(base, real)))):
                out.append(f)
    return out


def stand_in_table_used(asset_dir=None, tasks=None):
    return bool(stand_ins(asset_dir, tasks))


def missing_files(task, asset_dir=None):
    base = os.path.join(asset_dir or default_asset_dir(), BRIDGE_REL)
    out = []
    for f in ["custom/info_bridge_custom_v0.json"] + TASK_FILES[task]:
        alts = f if isinstance(f, tuple) else (f,)
        if not any(os.path.exists(os.path.join(base, a)) for a in alts):
            out.append(os.path.join(BRIDGE_REL, alts[0]))
    urdf = os.path.join(WIDOWX_REL, "wx250s.urdf")
    if not os.path.exists(os.path.join(asset_dir or default_asset_dir(), urdf)):
        out.append(urdf)
    return out


def banner(asset_dir=None, tasks=None):
    s = f"env: ManiSkill3 {MANISKILL_VERSION} Bridge digital twins (SimplerEnv WidowX tasks, visual matching)"
    used = stand_ins(asset_dir, tasks)
    if used:
        s += f" — {STAND_IN_LABEL} (stand-in {', '.join(os.path.basename(f) for f in used)})"
    return s


def _stage_box(lo, hi):
    import trimesh

    lo, hi = np.array(lo, dtype=np.float64), np.array(hi, dtype=np.float64)
    box = trimesh.creation.box(extents=hi - lo)
    box.apply_translation((hi + lo) / 2 - np.array(STAGE_OFFSET))
    # file frame = Rx(+90)^-1 . (world - offset): (X, Y, Z) -> (X, Z, -Y)
    box.apply_transform(np.array([[1, 0, 0, 0], [0, 0, 1, 0], [0, -1, 0, 0], [0, 0, 0, 1]], dtype=np.float64))
    return box


def write_stand_in_table(asset_dir, force=False):
    """Writes stages/bridge_table_1_v1.glb = a flat box (collision + visual; the green-screen photo hides it in rgb),
    and where they are missing the sink scene's box (bridge_table_1_v2.glb) and the eggplant's stand-in visual mesh,
    each with a sidecar FILE.STAND_IN.txt that makes every run of its tasks say STAND_IN_LABEL. Never replaces a real
    file (one without a sidecar) unless force. Returns the files written."""
    import trimesh

    base = os.path.join(asset_dir, BRIDGE_REL)
    os.makedirs(os.path.join(base, "stages"), exist_ok=True)
    written = []

    def mark(path, text):
        with open(path + STAND_IN_SUFFIX, "w") as f:
            f.write(f"{os.path.basename(path)} is a stand-in: {text}. Written by sim/simplerenv/maniskill3.py "
                    f"write-stand-in-table; runs with it are labelled: {STAND_IN_LABEL}.\n")
        written.append(path)

    for stage, (lo, hi), what in ((STAGE_FLAT, STAND_IN_BOX_WORLD, "flat table"),
                                  (STAGE_SINK, STAND_IN_SINK_BOX_WORLD, "sink scene")):
        path = os.path.join(base, "stages", stage)
        if os.path.exists(path) and not os.path.exists(path + STAND_IN_SUFFIX) and not force:
            print(f"kept the real {path}")
            continue
        _stage_box(lo, hi).export(path)
        mark(path, f"a flat collision box for the {what}, world x {lo[0]}..{hi[0]}, y {lo[1]}..{hi[1]}, top z {hi[2]}, "
                   "not the Bridge stage mesh")
    egg = os.path.join(base, "custom", "models", "eggplant")
    if os.path.exists(os.path.join(egg, "collision.obj")) and not os.path.exists(os.path.join(egg, "textured.dae")):
        m = trimesh.load(os.path.join(egg, "collision.obj"), force="mesh")
        m.visual = trimesh.visual.TextureVisuals(material=trimesh.visual.material.PBRMaterial(
            baseColorFactor=np.array(EGGPLANT_RGBA, dtype=np.float64) / 255, metallicFactor=0.0, roughnessFactor=0.8))
        path = os.path.join(egg, "textured.glb")
        m.export(path)
        mark(path, "the eggplant's collision mesh in one colour, for its missing visual mesh textured.dae")
    return written


# ----------------------------------------------------------------------------------------------------------------
# the adapter
# ----------------------------------------------------------------------------------------------------------------


class SceneObject:
    """What run.scene_objects reads: .id (segmentation id) and .name."""

    def __init__(self, ident, name):
        self.id = int(ident)
        self.name = name


def _np(x):
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _scalar(x):
    a = _np(x).reshape(-1)
    v = a[0].item() if a.size else None
    return v


def rotvec_to_mat(r):
    r = np.asarray(r, dtype=np.float64)
    th = float(np.linalg.norm(r))
    if th < 1e-12:
        return np.eye(3)
    k = r / th
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + math.sin(th) * K + (1 - math.cos(th)) * (K @ K)


def simplerenv_obs(o, position_z, base_pose, tcp_pose):
    """A ManiSkill3 observation (obs_mode "rgb+segmentation", num_envs=1: every array has a batch axis of one; numpy
    arrays or torch tensors) -> SimplerEnv's observation dict, what run.py's obs_to_infer reads. numpy only, so
    maniskill3_selftest.py runs it without ManiSkill3.

    position_z: the z channel (1, H, W) of the same camera's Position texture of the same render (OpenGL camera frame,
    metres; the camera looks along -z); base_pose / tcp_pose: the robot's root pose and the ee_gripper_link pose in the
    world, [p, q wxyz], shape (1, 7)."""
    sd, sp, ag = o["sensor_data"][CAMERA], o["sensor_param"][CAMERA], o["agent"]
    rgb = _np(sd["rgb"])[0]
    seg = _np(sd["segmentation"])[0, ..., 0].astype(np.uint32)
    depth = -_np(position_z)[0].astype(np.float32)
    depth[seg == 0] = 0.0  # nothing hit
    return {
        "image": {CAMERA: {
            "rgb": np.ascontiguousarray(rgb),
            "depth": depth[..., None],
            # SimplerEnv layout: [..., 0] mesh-level, [..., 1] actor-level id; ManiSkill3 gives the per-scene
            # actor/link id, used for both
            "Segmentation": np.ascontiguousarray(np.stack([seg, seg], axis=-1)),
        }},
        "camera_param": {CAMERA: {
            "intrinsic_cv": _np(sp["intrinsic_cv"])[0].astype(np.float64),
            "extrinsic_cv": _np(sp["extrinsic_cv"])[0].astype(np.float64),
            "cam2world_gl": _np(sp["cam2world_gl"])[0].astype(np.float64),
        }},
        "agent": {
            "qpos": _np(ag["qpos"])[0].astype(np.float64),
            "qvel": _np(ag["qvel"])[0].astype(np.float64),
            "base_pose": _np(base_pose)[0].astype(np.float64),
            "controller": {"arm": {"target_pose": _np(ag["controller"]["arm"]["target_pose"])[0]
                                   .astype(np.float64)}},
        },
        "extra": {"tcp_pose": _np(tcp_pose)[0].astype(np.float64)},
    }


class ManiSkill3Env:
    """SimplerEnv-style API over one ManiSkill3 Bridge env (num_envs=1, CPU simulation):
    reset(options={"obj_init_options": {"episode_id": k}}) -> (obs, info); step(a) -> (obs, r, terminated, truncated,
    info); get_language_instruction(); unwrapped.episode_source_obj / episode_target_obj."""

    def __init__(self, task, control_mode=DELTA_MODE, max_episode_steps=None, shader="default", convert_actions=True,
                 asset_dir=None):
        if control_mode != DELTA_MODE:
            raise SystemExit(f"error: ManiSkill3's Bridge envs register only {DELTA_MODE} "
                             f"[bridge_dataset_eval/base_env.py]; {control_mode} is not available")
        self.asset_dir = asset_dir or default_asset_dir()
        os.environ["MS_ASSET_DIR"] = self.asset_dir  # read when mani_skill is first imported
        miss = missing_files(task, self.asset_dir)
        if miss:
            raise SystemExit(f"error: ManiSkill3 assets missing under {self.asset_dir}: {', '.join(miss)} "
                             "(see sim/simplerenv/README.md, 'ManiSkill3'; setup.sh --assets DIR [--stand-in-table])")
        import gymnasium as gym
        import torch
        import mani_skill  # noqa: F401
        from mani_skill.envs.tasks.digital_twins import bridge_dataset_eval  # noqa: F401  (registers the envs)
        from mani_skill.utils.geometry import rotation_conversions

        if os.path.realpath(str(mani_skill.ASSET_DIR)) != os.path.realpath(os.path.join(self.asset_dir, "data")):
            raise SystemExit(f"error: mani_skill was imported with MS_ASSET_DIR={mani_skill.ASSET_DIR}, "
                             f"expected {self.asset_dir}/data")
        self._torch, self._rc = torch, rotation_conversions
        self.task = task
        self.env_id = TASK_IDS[task]
        self.control_mode = control_mode
        self.convert_actions = convert_actions
        self.stand_ins = stand_ins(self.asset_dir, [task])
        kw = dict(obs_mode="rgb+segmentation", num_envs=1, control_mode=control_mode,
                  sensor_configs=dict(shader_pack=shader))
        if max_episode_steps is not None:
            kw["max_episode_steps"] = int(max_episode_steps)
        self.env = gym.make(self.env_id, **kw)
        self.u = self.env.unwrapped
        self._cam = self.u.scene.sensors[CAMERA]
        self._arm = self.u.agent.controller.controllers["arm"]
        self.episode_source_obj = None
        self.episode_target_obj = None
        self._last_action_ms3 = None

    # SimplerEnv API -------------------------------------------------------------------------------------------
    @property
    def unwrapped(self):
        return self

    def get_language_instruction(self):
        s = self.u.get_language_instruction()
        return s[0] if isinstance(s, (list, tuple)) else s

    def reset(self, seed=None, options=None):
        options = options or {}
        ep = options.get("episode_id", (options.get("obj_init_options") or {}).get("episode_id"))
        if ep is None:
            raise ValueError("reset needs options={'obj_init_options': {'episode_id': k}}")
        ep = int(ep)
        obs, info = self.env.reset(seed=ep if seed is None else seed,
                                   options={"episode_id": self._torch.tensor([ep])})
        self.episode_id = ep
        for role, name in (("source", self.u.source_obj_name), ("target", self.u.target_obj_name)):
            actor = self.u.objs[name]
            setattr(self, f"episode_{role}_obj", SceneObject(_scalar(actor.per_scene_id), name))
        return self._obs(obs), self._info(info)

    def step(self, action):
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (7,):
            raise ValueError(f"action must be 7-D ({DELTA_MODE}), got {a.shape}")
        if self.convert_actions:
            a = self.protocol_to_ms3_action(a)
        self._last_action_ms3 = a
        obs, reward, terminated, truncated, info = self.env.step(
            self._torch.tensor(a[None], dtype=self._torch.float32))
        return self._obs(obs), float(_scalar(reward) or 0.0), bool(_scalar(terminated)), bool(_scalar(truncated)), \
            self._info(info)

    def close(self):
        self.env.close()

    # conversions ---------------------------------------------------------------------------------------------
    def protocol_to_ms3_action(self, a):
        """SimplerEnv align2 + axis-angle delta -> ManiSkill3 3.0.1 root_translation:root_aligned_body_rotation + euler
        XYZ delta that yields the same new target pose (module docstring)."""
        torch = self._torch
        dp, r, g = a[:3], a[3:6], a[6]
        R = rotvec_to_mat(r)
        p_t = _np(self._arm._target_pose.p)[0].astype(np.float64)
        p_c = _np(self._arm.ee_pose_at_base.p)[0].astype(np.float64)
        dp2 = dp + (R - np.eye(3)) @ (p_t - p_c)
        e = self._rc.matrix_to_euler_angles(torch.tensor(R[None], dtype=torch.float64), "XYZ")[0].numpy()
        return np.concatenate([dp2, e, [g]])

    def position_z(self):
        """The z channel (1, H, W) of the last render's Position texture (OpenGL camera frame, metres)."""
        tex = self._cam.get_obs(rgb=False, depth=True, position=False, segmentation=False,
                                apply_texture_transforms=False)
        if "Position" not in tex:
            raise RuntimeError(f"camera gave {list(tex)} instead of a float 'Position' texture; the adapter needs "
                               "sensor_configs shader_pack='default'")
        return np.array(_np(tex["Position"])[..., 2])

    def depth(self):
        """z-depth (H, W) float32 in metres from the last render's Position texture (OpenGL camera frame)."""
        return -self.position_z()[0].astype(np.float32)

    def raw_pieces(self):
        """What simplerenv_obs reads besides the observation: the Position texture's z, the robot's root pose and the
        ee_gripper_link pose (world, [p, q wxyz], batch of one)."""
        robot = self.u.agent.robot
        return (self.position_z(), np.array(_np(robot.pose.raw_pose)),
                np.array(_np(robot.links_map["ee_gripper_link"].pose.raw_pose)))

    def _obs(self, o):
        return simplerenv_obs(o, *self.raw_pieces())

    @staticmethod
    def _info(info):
        out = {}
        for k, v in info.items():
            if hasattr(v, "shape") or isinstance(v, (list, tuple)):
                v = _scalar(v)
            out[k] = v
        stats = ("moved_correct_obj", "moved_wrong_obj", "is_src_obj_grasped", "consecutive_grasp", "src_on_target")
        out["episode_stats"] = {k: out[k] for k in stats if k in out}
        return out


def make(task, control_mode=DELTA_MODE, max_episode_steps=None, **kw):
    return ManiSkill3Env(task, control_mode=control_mode, max_episode_steps=max_episode_steps, **kw)


# ----------------------------------------------------------------------------------------------------------------
# self-check: reset, step, render, depth
# ----------------------------------------------------------------------------------------------------------------


def depth_check(env, obs, role="source"):
    """Back-projects the role's segmented pixels (z-depth, intrinsic_cv, extrinsic_cv) into the actor's frame and
    measures their distance to its collision mesh (a dense surface sample). Returns a dict of mm statistics."""
    import trimesh
    from scipy.spatial import cKDTree

    img, cam = obs["image"][CAMERA], obs["camera_param"][CAMERA]
    obj = getattr(env, f"episode_{role}_obj")
    seg, depth = img["Segmentation"][..., 1], img["depth"][..., 0].astype(np.float64)
    m = (seg == obj.id) & (depth > 0)
    if not m.any():
        return dict(role=role, name=obj.name, pixels=0)
    v, u = np.nonzero(m)
    K, E = cam["intrinsic_cv"], cam["extrinsic_cv"]
    E = np.vstack([E, [0, 0, 0, 1]]) if E.shape == (3, 4) else E
    z = depth[m]
    pc = np.stack([(u - K[0, 2]) * z / K[0, 0], (v - K[1, 2]) * z / K[1, 1], z, np.ones_like(z)], axis=1)
    pw = (np.linalg.inv(E) @ pc.T).T[:, :3]
    pose = _np(env.u.objs[obj.name].pose.raw_pose)[0].astype(np.float64)
    local = (pw - pose[:3]) @ quat_to_mat(pose[3:7])
    from mani_skill.envs.tasks.digital_twins.bridge_dataset_eval.base_env import BRIDGE_DATASET_ASSET_PATH
    mesh = trimesh.load(str(BRIDGE_DATASET_ASSET_PATH / "custom" / "models" / obj.name / "collision.obj"),
                        force="mesh")
    surf, _ = trimesh.sample.sample_surface(mesh, 200000, seed=0)
    dist, _ = cKDTree(surf).query(local)
    return dict(role=role, name=obj.name, pixels=int(m.sum()), median_mm=round(float(np.median(dist)) * 1000, 2),
                p95_mm=round(float(np.percentile(dist, 95)) * 1000, 2), max_mm=round(float(dist.max()) * 1000, 2))


def action_check(env):
    """One converted action (translation + a rotation about all three axes): the controller's new target must be
    SimplerEnv's align2 target. Returns the position (mm) and rotation (deg) differences."""
    arm = env._arm
    p_t, q_t = _np(arm._target_pose.p)[0].astype(np.float64), _np(arm._target_pose.q)[0].astype(np.float64)
    p_c = _np(arm.ee_pose_at_base.p)[0].astype(np.float64)
    a = np.array([0.01, -0.02, 0.015, 0.1, -0.15, 0.2, 1.0])
    R = rotvec_to_mat(a[3:6])
    want_p = p_c + a[:3] + R @ (p_t - p_c)
    want_R = R @ quat_to_mat(q_t)
    env.step(a)
    got_p, got_R = _np(arm._target_pose.p)[0], quat_to_mat(_np(arm._target_pose.q)[0])
    ang = math.degrees(math.acos(max(-1.0, min(1.0, (np.trace(want_R.T @ got_R) - 1) / 2))))
    return dict(position_mm=round(float(np.linalg.norm(got_p - want_p)) * 1000, 4), rotation_deg=round(ang, 5))


def cmd_check(args):
    t0 = time.perf_counter()
    env = make(args.task)
    t_make = time.perf_counter() - t0
    out = dict(task=args.task, env_id=env.env_id, banner=banner(env.asset_dir, [args.task]), make_s=round(t_make, 2),
               episodes=[])
    for ep in args.episodes:
        t = time.perf_counter()
        obs, _ = env.reset(options={"obj_init_options": {"episode_id": ep}})
        t_reset = time.perf_counter() - t
        d = [depth_check(env, obs, role) for role in ("source", "target")]
        t = time.perf_counter()
        n = 5
        for _ in range(n):
            obs, _, _, _, info = env.step(np.array([0, 0, 0, 0, 0, 0, 1.0]))
        t_step = (time.perf_counter() - t) / n
        act = action_check(env)
        out["episodes"].append(dict(episode_id=ep, reset_s=round(t_reset, 3), step_s=round(t_step, 3),
                                    rgb=list(obs["image"][CAMERA]["rgb"].shape),
                                    depth_range_m=[round(float(obs["image"][CAMERA]["depth"].min()), 3),
                                                   round(float(obs["image"][CAMERA]["depth"].max()), 3)],
                                    depth_vs_mesh=d, action_conversion=act, success=info.get("success")))
    if args.save_rgb:
        from PIL import Image
        Image.fromarray(obs["image"][CAMERA]["rgb"]).save(args.save_rgb)
    env.close()
    if args.json:
        print(json.dumps(out, indent=1))
    print(f"{out['task']} ({out['env_id']}): gym.make {out['make_s']} s")
    for e in out["episodes"]:
        d = "; ".join(f"{x['role']} {x['name']}: {x['pixels']} px" + (
            f", to mesh median {x['median_mm']} / p95 {x['p95_mm']} / max {x['max_mm']} mm" if x["pixels"] else "")
            for x in e["depth_vs_mesh"])
        a = e["action_conversion"]
        print(f"ep {e['episode_id']}: reset {e['reset_s']} s, step {e['step_s']} s, depth {e['depth_range_m']} m; {d}; "
              f"action conversion {a['position_mm']} mm / {a['rotation_deg']} deg")
    bad = [e for e in out["episodes"] for d in e["depth_vs_mesh"]
           if d["role"] == "source" and (d.get("pixels", 0) == 0 or d["p95_mm"] > args.tol_mm)]
    bad += [e for e in out["episodes"] if e["action_conversion"]["position_mm"] > 0.5
            or e["action_conversion"]["rotation_deg"] > 0.05]
    print("check: " + ("FAILED" if bad else "ok") + f" ({out['banner']})")
    return 1 if bad else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="reset, step, render one task; check depth against the source mesh and the "
                                     "action conversion")
    c.add_argument("--task", default="widowx_carrot_on_plate", choices=list(TASK_IDS))
    c.add_argument("--episodes", type=lambda s: [int(x) for x in s.split(",")], default=[0, 13])
    c.add_argument("--tol-mm", type=float, default=5.0, help="p95 distance of source pixels to its mesh")
    c.add_argument("--save-rgb", default=None, help="write the last rgb frame to this PNG")
    c.add_argument("--json", action="store_true", help="also print the measurements as JSON")
    w = sub.add_parser("write-stand-in-table", help="write flat collision boxes in place of the missing stages "
                                                    "(and a stand-in eggplant visual mesh)")
    w.add_argument("--assets", default=default_asset_dir(), help="the MS_ASSET_DIR folder")
    w.add_argument("--force", action="store_true", help="replace an existing real stage file")
    args = p.parse_args(argv)
    if args.cmd == "check":
        return cmd_check(args)
    for path in write_stand_in_table(args.assets, force=args.force):
        print(path)
    print(STAND_IN_LABEL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
