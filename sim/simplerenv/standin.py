"""STAND-IN for SimplerEnv's four WidowX (Bridge) tasks.  THIS IS NOT SimplerEnv.

It exists so that `run.py` (the official-protocol runner) and pointact's `serve bridge` server can be exercised
end to end on machines where SimplerEnv cannot run (no sapien 2.2.2 renderer, no Git LFS assets, CI).
Everything here is numpy only and deterministic.

What it copies from SimplerEnv (simpler-env/SimplerEnv simpler_env/__init__.py and, in simpler-env/ManiSkill2_real2sim,
mani_skill2_real2sim/envs/sapien_env.py, envs/custom_scenes/{base_env,put_on_in_scene}.py,
agents/configs/widowx/defaults.py, agents/controllers/pd_ee_pose.py):
  * the API: `reset(options={"obj_init_options": {"episode_id": i}}) -> (obs, info)`,
    `step(action) -> (obs, reward, terminated, truncated, info)`, `get_language_instruction()`, `env.unwrapped`,
    `unwrapped.episode_source_obj` / `episode_target_obj` (objects with `.name` and `.id`);
  * the observation dict of obs_mode "rgbd" (keys and shapes of the rgbd observation, camera "3rd_view_camera" 640x480,
    fx=fy=623.588, cx=319.501, cy=239.545, z-depth in metres, Segmentation (H,W,4) uint32 with the actor id in [..., 1]);
  * world frame != robot-base frame (base at world (0.147, 0.028, 0.87), eggplant task (0.127, 0.06, 0.87),
    identity rotation; table top at world z = 0.87);
  * the WidowX 250 6-DOF kinematics (parsed from robot-configs/widowx250/wx250s.urdf, TCP = ee_gripper_link);
  * the stock controller `arm_pd_ee_target_delta_pose_align2_gripper_pd_joint_pos` (7-D delta applied to the
    previous TARGET about the current EE position, base-frame axes, no clipping, IK, IK failure = no motion) and the
    SoFar-style `arm_pd_joint_pos_gripper_pd_joint_pos` (8-D absolute joint targets);
  * 24 deterministic episodes per task, the instructions, step budgets (60 / 120) and the success rule of
    `PutOnInSceneEnv.evaluate` (source centre within the target's xy half-diagonal + 3 mm, source centre above the
    target centre, gap between them <= 2 cm (eggplant 6 cm)); terminated = success, truncated = step budget.

What it is NOT:
  * no physics: objects are oriented boxes that sit on the table (or on the highest surface under their centre
    after being released); nothing is pushed, nothing collides with the robot, the gripper can pass through things;
  * a grasp is a rule (fingers close while the TCP is inside the object's box grown by 1 cm and the object's
    chord along the closing axis through the TCP is shorter than the finger gap), not contact physics;
  * the robot is NOT rendered (no arm in the images, no occlusion by the arm); there is no green-screen photo:
    the RGB is a flat-shaded synthetic image of the table and the boxes;
  * the eggplant "basket" is a visible box basket with its own actor id; in real SimplerEnv the eggplant target is an
    invisible `dummy_sink_target_plane` and the basket (sink) is part of the stage mesh;
  * success numbers obtained here are NOT SimplerEnv numbers and must never be reported as such.
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET

import numpy as np

from poses import mat_to_quat, quat_to_mat  # noqa: E402  (same folder)

BANNER = "env: stand-in (not SimplerEnv)"

# ----------------------------------------------------------------------------------------------------------------
# rotations (quaternions are [w, x, y, z], like SAPIEN)
# ----------------------------------------------------------------------------------------------------------------


def rotvec_to_mat(r):
    r = np.asarray(r, dtype=np.float64)
    th = float(np.linalg.norm(r))
    if th < 1e-12:
        return np.eye(3)
    k = r / th
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + math.sin(th) * K + (1 - math.cos(th)) * (K @ K)


def mat_to_rotvec(R):
    R = np.asarray(R, dtype=np.float64)
    c = (np.trace(R) - 1.0) / 2.0
    c = min(1.0, max(-1.0, c))
    th = math.acos(c)
    if th < 1e-9:
        return np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]]) / 2.0
    if th > math.pi - 1e-4:
        # axis from the symmetric part (R = 2kk^T - I at pi)
        M = (R + np.eye(3)) / 2.0
        i = int(np.argmax(np.diag(M)))
        k = M[:, i] / math.sqrt(max(M[i, i], 1e-12))
        # fix the sign with the antisymmetric part when it carries information
        v = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
        if np.dot(v, k) < 0:
            k = -k
        return k / np.linalg.norm(k) * th
    v = np.array([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])
    return v / (2.0 * math.sin(th)) * th


def rpy_to_mat(r, p, y):
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    Rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    Ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    Rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return Rz @ Ry @ Rx


def rotz(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def make_T(R, p):
    T = np.eye(4)
    T[:3, :3] = R
    T[:3, 3] = p
    return T


def pose7(T):
    """4x4 -> [x, y, z, qw, qx, qy, qz] (SAPIEN's vectorize_pose layout)."""
    return np.concatenate([T[:3, 3], mat_to_quat(T[:3, :3])])


def T_from_pose7(v):
    v = np.asarray(v, dtype=np.float64)
    return make_T(quat_to_mat(v[3:7]), v[:3])


# ----------------------------------------------------------------------------------------------------------------
# WidowX 250 kinematics from the URDF
# ----------------------------------------------------------------------------------------------------------------

URDF_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "robot-configs", "widowx250", "wx250s.urdf")
ARM_JOINTS = ["waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate"]
TCP_LINK = "ee_gripper_link"
INIT_ARM_QPOS = np.array([-0.01840777, 0.0398835, 0.22242722, -0.00460194, 1.36524296, 0.00153398])
FINGER_MIN, FINGER_MAX = 0.015, 0.037  # prismatic finger joint range (m), from the URDF
# Finger pads touch at 0.015 and stand 44 mm apart at 0.037 (URDF comment + pad geometry): gap = 2 (q - 0.015).


def finger_gap(q_finger):
    return 2.0 * (q_finger - FINGER_MIN)


def gripper_action_to_finger(g):
    """SimplerEnv gripper_pd_joint_pos, normalize_action=True: g in [-1, 1] -> 0.014..0.038 m; +1 = open.
    Clipped to the joint range 0.015..0.037."""
    g = float(np.clip(g, -1.0, 1.0))
    return float(np.clip(0.014 + (g + 1.0) / 2.0 * 0.024, FINGER_MIN, FINGER_MAX))


class WidowXKinematics:
    def __init__(self, urdf_path=URDF_PATH):
        if not os.path.exists(urdf_path):
            raise FileNotFoundError(f"WidowX URDF not found at {urdf_path}")
        root = ET.parse(urdf_path).getroot()
        joints = {}
        for j in root.findall("joint"):
            org = j.find("origin")
            xyz = np.array([float(v) for v in org.get("xyz", "0 0 0").split()]) if org is not None else np.zeros(3)
            rpy = [float(v) for v in org.get("rpy", "0 0 0").split()] if org is not None else [0, 0, 0]
            ax = j.find("axis")
            axis = np.array([float(v) for v in ax.get("xyz").split()]) if ax is not None else np.array([1.0, 0, 0])
            lim = j.find("limit")
            joints[j.find("child").get("link")] = dict(
                name=j.get("name"),
                type=j.get("type"),
                parent=j.find("parent").get("link"),
                T=make_T(rpy_to_mat(*rpy), xyz),
                axis=axis / np.linalg.norm(axis),
                lower=float(lim.get("lower")) if lim is not None and lim.get("lower") else -math.pi,
                upper=float(lim.get("upper")) if lim is not None and lim.get("upper") else math.pi,
            )
        # walk from the TCP link up to base_link
        chain = []
        link = TCP_LINK
        while link != "base_link":
            if link not in joints:
                raise ValueError(f"URDF: no joint leads to link {link}")
            chain.append(joints[link])
            link = joints[link]["parent"]
        chain.reverse()
        self.chain = chain
        self.fixed_on_path = [j["name"] for j in chain if j["type"] == "fixed"]
        movable = [j for j in chain if j["type"] != "fixed"]
        names = [j["name"] for j in movable]
        if names != ARM_JOINTS:
            raise ValueError(f"URDF chain joints {names} != expected {ARM_JOINTS}")
        self.lower = np.array([j["lower"] for j in movable])
        self.upper = np.array([j["upper"] for j in movable])

    def fk_all(self, q):
        """Returns (T_base_tcp, list of (joint origin, joint axis) in the base frame for the 6 arm joints)."""
        T = np.eye(4)
        frames = []
        i = 0
        for j in self.chain:
            T = T @ j["T"]
            if j["type"] != "fixed":
                a = T[:3, :3] @ j["axis"]
                frames.append((T[:3, 3].copy(), a))
                T = T @ make_T(rotvec_to_mat(j["axis"] * q[i]), np.zeros(3))
                i += 1
        return T, frames

    def fk(self, q):
        return self.fk_all(q)[0]

    def jacobian(self, q):
        T, frames = self.fk_all(q)
        p = T[:3, 3]
        J = np.zeros((6, 6))
        for i, (o, a) in enumerate(frames):
            J[:3, i] = np.cross(a, p - o)
            J[3:, i] = a
        return T, J

    def ik(self, T_target, q0, iters=100, pos_tol=1e-3, rot_tol=1e-2):
        """Damped least squares from q0 within the URDF joint limits. Returns q or None (not converged)."""
        q = np.clip(np.array(q0, dtype=np.float64), self.lower, self.upper)
        pt, Rt = T_target[:3, 3], T_target[:3, :3]
        lam2 = 1e-4
        for _ in range(iters):
            T, J = self.jacobian(q)
            ep = pt - T[:3, 3]
            er = mat_to_rotvec(Rt @ T[:3, :3].T)
            if np.linalg.norm(ep) < pos_tol and np.linalg.norm(er) < rot_tol:
                return q
            e = np.concatenate([ep, er])
            dq = J.T @ np.linalg.solve(J @ J.T + lam2 * np.eye(6), e)
            n = np.linalg.norm(dq)
            if n > 0.5:
                dq *= 0.5 / n
            q = np.clip(q + dq, self.lower, self.upper)
        T = self.fk(q)
        if np.linalg.norm(pt - T[:3, 3]) < pos_tol and np.linalg.norm(mat_to_rotvec(Rt @ T[:3, :3].T)) < rot_tol:
            return q
        return None


# ----------------------------------------------------------------------------------------------------------------
# scene: boxes, tasks, episodes
# ----------------------------------------------------------------------------------------------------------------

TABLE_Z_WORLD = 0.87
TABLE_ACTOR_ID = 1
SOURCE_ACTOR_ID = 10
TARGET_ACTOR_ID = 11
CONTROL_FREQ = 5.0
DELTA_MODE = "arm_pd_ee_target_delta_pose_align2_gripper_pd_joint_pos"
JOINT_MODE = "arm_pd_joint_pos_gripper_pd_joint_pos"
ARM_MAX_JOINT_SPEED = 1.5  # rad/s -> 0.3 rad per 5 Hz step
FINGER_MAX_SPEED = 0.055  # m/s -> 0.011 m per step: the full 0.022 m stroke in 2 steps

CAM_NAME = "3rd_view_camera"
CAM_W, CAM_H = 640, 480
CAM_K = np.array([[623.588, 0.0, 319.501], [0.0, 623.588, 239.545], [0.0, 0.0, 1.0]])
CAM_EYE_BASE = np.array([0.0, -0.16, 0.36])
CAM_TARGET_BASE = np.array([0.3318, 0.0235, 0.0])


class Actor:
    """A rigid object made of boxes. Pose (R, p) in the ROBOT-BASE frame; parts are (centre, half size) in the
    object frame (origin at the centre of the object's bounding box)."""

    def __init__(self, actor_id, name, size, color, parts=None):
        self.id = int(actor_id)
        self.name = name
        self.size = np.array(size, dtype=np.float64)  # bounding box (x, y, z)
        self.color = np.array(color, dtype=np.float64)
        self.parts = parts if parts is not None else [(np.zeros(3), self.size / 2.0)]
        self.R = np.eye(3)
        self.p = np.zeros(3)

    def get_id(self):
        return self.id

    @property
    def T(self):
        return make_T(self.R, self.p)

    def place(self, x, y, yaw, z_surface=0.0):
        self.R = rotz(yaw)
        self.p = np.array([x, y, z_surface + self.size[2] / 2.0])

    def yaw(self):
        return math.atan2(self.R[1, 0], self.R[0, 0])

    def chord_through(self, pt, d):
        """Length of the line pt + t·d (unit d, base frame) inside the box: what two fingers closing along d through pt
        pinch. A long object turned a few degrees from the closing axis is still pinched across its width (the chord),
        where the bounding-box extent along d would wrongly include its length."""
        c = self.R.T @ (np.asarray(pt) - self.p)
        u = self.R.T @ np.asarray(d)
        h = self.size / 2.0
        # The finger pads reach below and above the TCP: a TCP within the grasp margin over a thin object (a spoon)
        # still pinches it, so the line is taken at a height inside the box.
        c[2] = min(max(c[2], -h[2]), h[2])
        lo, hi = -np.inf, np.inf
        for i in range(3):
            if abs(u[i]) < 1e-12:
                if abs(c[i]) > h[i]:
                    return 0.0
                continue
            t1, t2 = (-h[i] - c[i]) / u[i], (h[i] - c[i]) / u[i]
            lo, hi = max(lo, min(t1, t2)), min(hi, max(t1, t2))
        return float(max(hi - lo, 0.0))

    def contains(self, pt, margin=0.0):
        local = self.R.T @ (pt - self.p)
        return bool(np.all(np.abs(local) <= self.size / 2.0 + margin))

    def support_top_under(self, xy):
        """Highest top face of a part whose footprint contains xy (parts assumed yaw-only), else None."""
        best = None
        for c, h in self.parts:
            cw = self.p + self.R @ c
            local = self.R.T @ np.array([xy[0] - cw[0], xy[1] - cw[1], 0.0])
            if abs(local[0]) <= h[0] and abs(local[1]) <= h[1]:
                top = cw[2] + h[2]
                best = top if best is None else max(best, top)
        return best


def _basket_parts(size, wall=0.008):
    sx, sy, sz = size
    h = np.array(size) / 2.0
    floor_c = np.array([0, 0, -h[2] + wall / 2.0])
    parts = [(floor_c, np.array([h[0], h[1], wall / 2.0]))]
    wz = 0.0
    parts.append((np.array([h[0] - wall / 2.0, 0, wz]), np.array([wall / 2.0, h[1], h[2]])))
    parts.append((np.array([-h[0] + wall / 2.0, 0, wz]), np.array([wall / 2.0, h[1], h[2]])))
    parts.append((np.array([0, h[1] - wall / 2.0, wz]), np.array([h[0], wall / 2.0, h[2]])))
    parts.append((np.array([0, -h[1] + wall / 2.0, wz]), np.array([h[0], wall / 2.0, h[2]])))
    return parts


BASKET_SIZE = (0.22, 0.16, 0.07)
BASKET_WALL = 0.008

TASKS = {
    "widowx_spoon_on_towel": dict(
        instruction="put the spoon on the towel",
        max_episode_steps=60,
        base_xy=(0.147, 0.028),
        src=dict(name="bridge_spoon_generated_modified", size=(0.10, 0.025, 0.015), color=(0.72, 0.73, 0.76)),
        tgt=dict(name="table_cloth_generated_shorter", size=(0.14, 0.14, 0.004), color=(0.15, 0.35, 0.70)),
        z_tol=0.02,
        require_on_target=False,
        layout="pairs_x2",
    ),
    "widowx_carrot_on_plate": dict(
        instruction="put carrot on plate",
        max_episode_steps=60,
        base_xy=(0.147, 0.028),
        src=dict(name="bridge_carrot_generated_modified", size=(0.12, 0.03, 0.03), color=(0.90, 0.40, 0.05)),
        tgt=dict(name="bridge_plate_objaverse_larger", size=(0.16, 0.16, 0.015), color=(0.88, 0.86, 0.80)),
        z_tol=0.02,
        require_on_target=True,
        layout="pairs_x2",
    ),
    "widowx_stack_cube": dict(
        instruction="stack the green block on the yellow block",
        max_episode_steps=60,
        base_xy=(0.147, 0.028),
        src=dict(name="baked_green_cube_3cm", size=(0.03, 0.03, 0.03), color=(0.10, 0.65, 0.15)),
        tgt=dict(name="baked_yellow_cube_3cm", size=(0.03, 0.03, 0.03), color=(0.95, 0.80, 0.10)),
        z_tol=0.02,
        require_on_target=True,
        layout="pairs_24",
    ),
    "widowx_put_eggplant_in_basket": dict(
        instruction="put eggplant into yellow basket",
        max_episode_steps=120,
        base_xy=(0.127, 0.06),
        # 4 cm thick: the WidowX pads open to 44 mm, so a thicker eggplant could not be grasped at all
        src=dict(name="eggplant", size=(0.12, 0.04, 0.04), color=(0.35, 0.10, 0.45)),
        tgt=dict(name="yellow_basket", size=BASKET_SIZE, color=(0.95, 0.78, 0.15), basket=True),
        z_tol=0.06,
        require_on_target=False,
        layout="eggplant",
    ),
}
TASK_NAMES = list(TASKS)


def _footprint_overlap(a_xy, a_yaw, a_half, b_xy, b_yaw, b_half, margin):
    """2-D separating-axis test between two yawed rectangles grown by margin."""
    axes = []
    for yaw in (a_yaw, b_yaw):
        axes += [np.array([math.cos(yaw), math.sin(yaw)]), np.array([-math.sin(yaw), math.cos(yaw)])]
    d = np.array(b_xy) - np.array(a_xy)

    def radius(yaw, half, ax):
        u = np.array([math.cos(yaw), math.sin(yaw)])
        v = np.array([-math.sin(yaw), math.cos(yaw)])
        return abs(ax @ u) * (half[0] + margin) + abs(ax @ v) * (half[1] + margin)

    for ax in axes:
        if abs(d @ ax) > radius(a_yaw, a_half, ax) + radius(b_yaw, b_half, ax):
            return False
    return True


def episode_layout(task, episode_id):
    """Deterministic layout of episode `episode_id` (0..23): ((src x, y, yaw), (tgt x, y, yaw)) in the base frame."""
    cfg = TASKS[task]
    if not 0 <= episode_id < 24:
        raise ValueError(f"episode_id must be in 0..23, got {episode_id}")
    src_half = np.array(cfg["src"]["size"][:2]) / 2.0
    tgt_half = np.array(cfg["tgt"]["size"][:2]) / 2.0
    if cfg["layout"] == "eggplant":
        # 8 xy (2 x 4 grid) x 3 yaws, basket fixed (like SimplerEnv: target fixed, 8 source xy x 3 orientations)
        xs, ys = [0.25, 0.31], [-0.125, -0.095, -0.065, -0.035]
        grid = [(x, y) for x in xs for y in ys]
        yaws = [0.0, math.pi / 4, -math.pi / 4]
        xy = grid[episode_id // 3]
        return (xy[0], xy[1], yaws[episode_id % 3]), (0.30, 0.10, 0.0)
    if cfg["layout"] == "pairs_x2":
        pair, src_yaws = episode_id // 2, [0.0, math.pi / 2]
        src_yaw_options = src_yaws
        src_yaw = src_yaws[episode_id % 2]
    else:
        pair, src_yaw_options, src_yaw = episode_id, [0.0], 0.0
    seed = 7919 * (TASK_NAMES.index(task) + 1) + pair
    rng = np.random.default_rng(seed)
    for _ in range(10000):
        s = (rng.uniform(0.22, 0.38), rng.uniform(-0.12, 0.14))
        t = (rng.uniform(0.22, 0.38), rng.uniform(-0.12, 0.14))
        if math.dist(s, t) < 0.08:
            continue
        if any(_footprint_overlap(s, yw, src_half, t, 0.0, tgt_half, 0.01) for yw in src_yaw_options):
            continue
        return (s[0], s[1], src_yaw), (t[0], t[1], 0.0)
    raise RuntimeError("layout generation failed")


# ----------------------------------------------------------------------------------------------------------------
# renderer (vectorised ray casting, numpy)
# ----------------------------------------------------------------------------------------------------------------

LIGHT_DIR = np.array([0.3, -0.25, 1.0]) / np.linalg.norm([0.3, -0.25, 1.0])
TABLE_COLOR = np.array([0.55, 0.50, 0.42])
TABLE_EXTENT_BASE = ((-0.35, 0.95), (-0.65, 0.65))  # x, y range of the table top in the base frame
BACKGROUND_RGB = np.array([60, 60, 64], dtype=np.uint8)


def look_at_cv(eye, target, up=(0.0, 0.0, 1.0)):
    """camera->frame rotation with OpenCV axes (x right, y down, z forward)."""
    f = np.asarray(target, float) - np.asarray(eye, float)
    f /= np.linalg.norm(f)
    r = np.cross(f, np.asarray(up, float))
    r /= np.linalg.norm(r)
    d = np.cross(f, r)
    return np.stack([r, d, f], axis=1)


class Renderer:
    def __init__(self, T_world_base):
        R_bc = look_at_cv(CAM_EYE_BASE, CAM_TARGET_BASE)
        self.T_base_cam = make_T(R_bc, CAM_EYE_BASE)
        self.T_world_cam = T_world_base @ self.T_base_cam  # base has identity rotation in world
        self.extrinsic_cv = np.linalg.inv(self.T_world_cam)  # world -> camera (OpenCV)
        self.intrinsic_cv = CAM_K.copy()
        # all rendering happens in the base frame
        u, v = np.meshgrid(np.arange(CAM_W, dtype=np.float64), np.arange(CAM_H, dtype=np.float64))
        dc = np.stack([(u - CAM_K[0, 2]) / CAM_K[0, 0], (v - CAM_K[1, 2]) / CAM_K[1, 1], np.ones_like(u)], axis=-1)
        self.dirs = dc @ R_bc.T  # (H, W, 3), base frame; the ray parameter t is the z-depth
        self.origin = CAM_EYE_BASE.copy()
        self._table = self._render_table()
        self._signs = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)], dtype=np.float64)

    def _render_table(self):
        rgb = np.empty((CAM_H, CAM_W, 3), dtype=np.uint8)
        rgb[:] = BACKGROUND_RGB
        depth = np.zeros((CAM_H, CAM_W), dtype=np.float32)
        seg = np.zeros((CAM_H, CAM_W), dtype=np.uint32)
        dz = self.dirs[..., 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (0.0 - self.origin[2]) / dz
        pts = self.origin + t[..., None] * self.dirs
        (x0, x1), (y0, y1) = TABLE_EXTENT_BASE
        hit = (t > 0) & (pts[..., 0] >= x0) & (pts[..., 0] <= x1) & (pts[..., 1] >= y0) & (pts[..., 1] <= y1)
        shade = 0.55 + 0.45 * LIGHT_DIR[2]
        # a faint wood-like stripe so the table is not perfectly uniform
        stripe = 0.94 + 0.06 * np.sin(pts[..., 0] * 60.0)
        col = np.clip(TABLE_COLOR[None, None, :] * shade * stripe[..., None] * 255.0, 0, 255).astype(np.uint8)
        rgb[hit] = col[hit]
        depth[hit] = t[hit].astype(np.float32)
        seg[hit] = TABLE_ACTOR_ID
        return rgb, depth, seg

    def _rect(self, corners_base):
        T_cb = np.linalg.inv(self.T_base_cam)
        pc = corners_base @ T_cb[:3, :3].T + T_cb[:3, 3]
        if np.any(pc[:, 2] <= 1e-3):
            return 0, CAM_W, 0, CAM_H
        uv = pc[:, :2] / pc[:, 2:3] * np.array([CAM_K[0, 0], CAM_K[1, 1]]) + CAM_K[:2, 2]
        u0 = int(max(0, math.floor(uv[:, 0].min()) - 1))
        u1 = int(min(CAM_W, math.ceil(uv[:, 0].max()) + 2))
        v0 = int(max(0, math.floor(uv[:, 1].min()) - 1))
        v1 = int(min(CAM_H, math.ceil(uv[:, 1].max()) + 2))
        return u0, u1, v0, v1

    def _draw(self, a, rgb, depth, seg):
        signs = self._signs
        for c, h in a.parts:
            cw = a.p + a.R @ c
            corners = cw + (signs * h) @ a.R.T
            u0, u1, v0, v1 = self._rect(corners)
            if u0 >= u1 or v0 >= v1:
                continue
            d = self.dirs[v0:v1, u0:u1] @ a.R  # (h, w, 3): ray directions in the part frame (R^T d)
            o = a.R.T @ (self.origin - cw)
            with np.errstate(divide="ignore", invalid="ignore"):
                inv = 1.0 / np.where(np.abs(d) < 1e-12, 1e-12, d)
            t1 = (-h - o) * inv
            t2 = (h - o) * inv
            tn = np.minimum(t1, t2)
            tnear = tn.max(axis=-1)
            tfar = np.maximum(t1, t2).min(axis=-1)
            dcur = depth[v0:v1, u0:u1]
            closer = (tfar >= tnear) & (tnear > 1e-6) & ((dcur == 0) | (tnear < dcur))
            if not closer.any():
                continue
            tn_h, d_h, tnear_h = tn[closer], d[closer], tnear[closer]
            ax = tn_h.argmax(axis=-1)
            idx = np.arange(len(ax))
            n_local = np.zeros_like(d_h)
            n_local[idx, ax] = -np.sign(d_h[idx, ax])
            lam = 0.35 + 0.65 * np.clip(n_local @ (a.R.T @ LIGHT_DIR), 0.0, 1.0)
            rgb[v0:v1, u0:u1][closer] = np.clip(a.color[None, :] * lam[:, None] * 255.0, 0, 255).astype(np.uint8)
            dcur[closer] = tnear_h.astype(np.float32)
            seg[v0:v1, u0:u1][closer] = a.id

    def render(self, actors, moving=None):
        """Ray-cast the table and every actor. `moving` (optional) is drawn last on top of a cached layer of the
        others (pure speed-up: the cache is keyed by the other actors' poses, the output is the same)."""
        static = [a for a in actors if a is not moving]
        key = tuple((a.id, a.R.tobytes(), a.p.tobytes()) for a in static)
        if getattr(self, "_static_key", None) != key:
            rgb0, depth0, seg0 = self._table
            rgb, depth, seg = rgb0.copy(), depth0.copy(), seg0.copy()
            for a in static:
                self._draw(a, rgb, depth, seg)
            self._static = (rgb, depth, seg)
            self._static_key = key
        rgb, depth, seg = (x.copy() for x in self._static)
        if moving is not None:
            self._draw(moving, rgb, depth, seg)
        seg4 = np.zeros((CAM_H, CAM_W, 4), dtype=np.uint32)
        seg4[..., 0] = seg
        seg4[..., 1] = seg
        return rgb, depth[..., None], seg4


# ----------------------------------------------------------------------------------------------------------------
# the environment
# ----------------------------------------------------------------------------------------------------------------


class StandInEnv:
    """SimplerEnv-shaped stand-in; see the module docstring. `make(task)` mirrors `simpler_env.make(task)`."""

    def __init__(self, task, control_mode=DELTA_MODE, max_episode_steps=None):
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; one of {TASK_NAMES}")
        if control_mode not in (DELTA_MODE, JOINT_MODE):
            raise ValueError(f"unsupported control mode {control_mode!r}")
        self.task = task
        self.cfg = TASKS[task]
        self.control_mode = control_mode
        self.max_episode_steps = int(max_episode_steps or self.cfg["max_episode_steps"])
        self.kin = WidowXKinematics()
        bx, by = self.cfg["base_xy"]
        self.T_world_base = make_T(np.eye(3), np.array([bx, by, TABLE_Z_WORLD]))
        self.renderer = Renderer(self.T_world_base)
        s, t = self.cfg["src"], self.cfg["tgt"]
        self.episode_source_obj = Actor(SOURCE_ACTOR_ID, s["name"], s["size"], s["color"])
        parts = _basket_parts(t["size"], BASKET_WALL) if t.get("basket") else None
        self.episode_target_obj = Actor(TARGET_ACTOR_ID, t["name"], t["size"], t["color"], parts)
        self.actors = [self.episode_source_obj, self.episode_target_obj]
        self.episode_id = None
        self.last_render_s = 0.0

    # gym-ish surface -------------------------------------------------------------------------------------------
    @property
    def unwrapped(self):
        return self

    def get_language_instruction(self):
        return self.cfg["instruction"]

    def close(self):
        pass

    def reset(self, seed=None, options=None):
        options = options or {}
        ep = (options.get("obj_init_options") or {}).get("episode_id")
        if ep is None:
            ep = int(np.random.default_rng(seed).integers(0, 24))
        self.episode_id = int(ep)
        (sx, sy, syaw), (tx, ty, tyaw) = episode_layout(self.task, self.episode_id)
        self.episode_source_obj.place(sx, sy, syaw)
        self.episode_target_obj.place(tx, ty, tyaw)
        self.src_init_p = self.episode_source_obj.p.copy()
        self.tgt_init_p = self.episode_target_obj.p.copy()
        self.qpos_arm = INIT_ARM_QPOS.copy()
        self.finger = FINGER_MAX
        self.target_T = self.kin.fk(self.qpos_arm)  # use_target: initialised to FK(initial qpos)
        self.joint_target = self.qpos_arm.copy()
        self.finger_target = FINGER_MAX
        self.held = None  # (actor, T_tcp_obj)
        self.support = {a.id: TABLE_ACTOR_ID for a in self.actors}
        self.elapsed_steps = 0
        self.consecutive = 0
        self.last_ik_failed = False
        self.episode_stats = dict(moved_correct_obj=False, moved_wrong_obj=False, is_src_obj_grasped=False,
                                  consecutive_grasp=False, src_on_target=False)
        obs = self._obs()
        info = dict(episode_id=self.episode_id, env="stand-in (not SimplerEnv)",
                    episode_source_obj_init_pose_wrt_robot_base=pose7(self.episode_source_obj.T),
                    episode_target_obj_init_pose_wrt_robot_base=pose7(self.episode_target_obj.T))
        return obs, info

    def step(self, action):
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        q_start = self.qpos_arm.copy()
        if self.control_mode == DELTA_MODE:
            if a.shape != (7,):
                raise ValueError(f"{DELTA_MODE} expects a 7-D action, got shape {a.shape}")
            if not np.all(np.isfinite(a)):
                raise ValueError("non-finite action")
            cur = self.kin.fk(q_start)
            cp = cur[:3, 3]
            Rd = rotvec_to_mat(a[3:6])
            Rt, pt = self.target_T[:3, :3], self.target_T[:3, 3]
            # target = (Pose(p=cur.p) . delta . Pose(p=cur.p)^-1) . prev_target
            new_R = Rd @ Rt
            new_p = Rd @ (pt - cp) + cp + a[:3]
            self.target_T = make_T(new_R, new_p)
            sol = self.kin.ik(self.target_T, q_start)
            self.last_ik_failed = sol is None
            self.joint_target = q_start if sol is None else sol
            self.finger_target = gripper_action_to_finger(a[6])
        else:
            if a.shape != (8,):
                raise ValueError(f"{JOINT_MODE} expects an 8-D action, got shape {a.shape}")
            if not np.all(np.isfinite(a)):
                raise ValueError("non-finite action")
            self.joint_target = np.clip(a[:6], self.kin.lower, self.kin.upper)
            self.finger_target = float(np.clip(np.mean(a[6:8]), FINGER_MIN, FINGER_MAX))
            self.last_ik_failed = False
        # PD lag: bounded joint speed
        step_max = ARM_MAX_JOINT_SPEED / CONTROL_FREQ
        self.qpos_arm = q_start + np.clip(self.joint_target - q_start, -step_max, step_max)
        T_tcp = self.kin.fk(self.qpos_arm)
        # fingers
        f_prev = self.finger
        f_step = FINGER_MAX_SPEED / CONTROL_FREQ
        f_new = f_prev + float(np.clip(self.finger_target - f_prev, -f_step, f_step))
        closing = f_new < f_prev - 1e-9
        if self.held is not None:
            obj, rel = self.held
            f_stop = FINGER_MIN + self._held_width / 2.0
            f_new = max(f_new, f_stop)
            # released once the gap exceeds the width + 5 mm (or the fingers are fully open: a 40 mm eggplant
            # leaves only 4 mm of play in the 44 mm opening)
            if f_new > f_stop and f_new >= min(f_stop + 0.0025, FINGER_MAX - 1e-9):
                self.held = None
                self._drop(obj)
        elif closing:
            y_dir = T_tcp[:3, 1]
            gap_prev = finger_gap(f_prev)
            for obj in self.actors:
                if obj is self.episode_target_obj and self.cfg["tgt"].get("basket"):
                    continue
                w = obj.chord_through(T_tcp[:3, 3], y_dir)
                f_stop = FINGER_MIN + w / 2.0
                if 0.005 < w < gap_prev and f_new <= f_stop and obj.contains(T_tcp[:3, 3], margin=0.01):
                    self.held = (obj, np.linalg.inv(T_tcp) @ obj.T)
                    self._held_width = w
                    f_new = f_stop
                    self.support[obj.id] = None
                    break
        self.finger = f_new
        if self.held is not None:
            obj, rel = self.held
            To = T_tcp @ rel
            obj.R, obj.p = To[:3, :3], To[:3, 3]
        self.elapsed_steps += 1
        info = self._evaluate()
        terminated = bool(info["success"])
        truncated = self.elapsed_steps >= self.max_episode_steps
        obs = self._obs()
        return obs, float(terminated), terminated, truncated, info

    # internals -------------------------------------------------------------------------------------------------
    def _drop(self, obj):
        yaw = obj.yaw()
        xy = obj.p[:2].copy()
        top, sup = 0.0, TABLE_ACTOR_ID
        for other in self.actors:
            if other is obj:
                continue
            t = other.support_top_under(xy)
            if t is not None and t > top:
                top, sup = t, other.id
        obj.place(xy[0], xy[1], yaw, z_surface=top)
        self.support[obj.id] = sup

    def _evaluate(self):
        src, tgt = self.episode_source_obj, self.episode_target_obj
        grasped = self.held is not None and self.held[0] is src
        self.consecutive = self.consecutive + 1 if grasped else 0
        consecutive_grasp = self.consecutive >= 5
        if self.cfg["tgt"].get("basket"):
            fc, fh = tgt.parts[0]
            t_center = tgt.p + tgt.R @ fc
            t_half_z = fh[2]
            # inner floor footprint (the outer footprint would count an eggplant lying next to the basket)
            t_half_diag = float(np.linalg.norm(np.array(tgt.size[:2]) - 2 * BASKET_WALL) / 2.0)
        else:
            t_center, t_half_z = tgt.p, tgt.size[2] / 2.0
            t_half_diag = float(np.linalg.norm(tgt.size[:2]) / 2.0)
        off = src.p - t_center
        xy_flag = float(np.linalg.norm(off[:2])) <= t_half_diag + 0.003
        z_flag = off[2] > 0 and (off[2] - t_half_z - src.size[2] / 2.0) <= self.cfg["z_tol"]
        src_on_target = bool(xy_flag and z_flag)
        if self.cfg["require_on_target"]:
            # SimplerEnv: the source may touch only the target (and the robot): here = rests on it or is held
            src_on_target = src_on_target and (grasped or self.support.get(src.id) == tgt.id)
        moved_correct = float(np.linalg.norm(src.p[:2] - self.src_init_p[:2])) > 0.03
        moved_wrong = float(np.linalg.norm(tgt.p[:2] - self.tgt_init_p[:2])) > 0.03
        st = self.episode_stats
        st["moved_correct_obj"] |= moved_correct
        st["moved_wrong_obj"] |= moved_wrong
        st["is_src_obj_grasped"] |= grasped
        st["consecutive_grasp"] |= consecutive_grasp
        st["src_on_target"] |= src_on_target
        return dict(moved_correct_obj=moved_correct, moved_wrong_obj=moved_wrong, is_src_obj_grasped=grasped,
                    consecutive_grasp=consecutive_grasp, src_on_target=src_on_target,
                    episode_stats=dict(st), success=src_on_target, elapsed_steps=self.elapsed_steps,
                    ik_failed=self.last_ik_failed)

    def _obs(self):
        import time

        t0 = time.perf_counter()
        rgb, depth, seg = self.renderer.render(self.actors, moving=self.held[0] if self.held is not None else None)
        self.last_render_s = time.perf_counter() - t0
        T_tcp_base = self.kin.fk(self.qpos_arm)
        qpos = np.concatenate([self.qpos_arm, [self.finger, self.finger]])
        controller = {"gripper": {}}
        if self.control_mode == DELTA_MODE:
            controller["arm"] = {"target_pose": pose7(self.target_T)}
        else:
            controller["arm"] = {}  # joint-position controllers keep no EE target (like SoFar's mode)
        return {
            "agent": {
                "qpos": qpos,
                "qvel": np.zeros(8),
                "controller": controller,
                "base_pose": pose7(self.T_world_base),
            },
            "extra": {"tcp_pose": pose7(self.T_world_base @ T_tcp_base)},
            "camera_param": {
                CAM_NAME: {
                    "intrinsic_cv": self.renderer.intrinsic_cv.copy(),
                    "extrinsic_cv": self.renderer.extrinsic_cv.copy(),
                    "cam2world_gl": self.renderer.T_world_cam @ np.diag([1.0, -1.0, -1.0, 1.0]),
                }
            },
            "image": {CAM_NAME: {"rgb": rgb, "depth": depth, "Segmentation": seg}},
        }

    # privileged helpers (for the self-test expert only; never sent to the policy) ------------------------------
    def tcp_base(self):
        return self.kin.fk(self.qpos_arm)

    def is_held(self, actor):
        return self.held is not None and self.held[0] is actor


def make(task, **kwargs):
    """Counterpart of `simpler_env.make(task)` for the stand-in."""
    return StandInEnv(task, **kwargs)
