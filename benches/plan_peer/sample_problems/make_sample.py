#!/usr/bin/env python3
"""Writes the sample problem file of the OMPL peer: sample.json and scene_sample.f32 beside it.

The arm approximates a UFACTORY xArm 6 with its gripper: joint origins and limits follow
robot-configs/xarm6/xarm6.urdf, the 21 spheres are a coarse hand-made cover (fewer than the
fitted robot-configs/xarm6/spheres.toml, enough to make the benchmark's geometry plausible).
The scene is a table, a wall in front of the arm (turned 20 degrees about z, so box rotations are
exercised), a shelf board above the right-hand side, and a 10x10x10 distance grid (2 cm cells)
with one occupied cell right of the wall. Problems 0-3 cannot go straight (the joint-space
segment hits the wall, the shelf board or the occupied cell); problem 4 is a short free move.
Each property is asserted when the file is written.

    python3 make_sample.py            # from any directory; needs numpy and ../model.py
"""

import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from model import make_checker  # noqa: E402

PI_2 = math.pi / 2


def pose(xyz=(0.0, 0.0, 0.0), roll=0.0, yaw=0.0):
    """Row-major 4x4 of a URDF origin with only roll and yaw (all this arm needs)."""
    cr, sr, cy, sy = math.cos(roll), math.sin(roll), math.cos(yaw), math.sin(yaw)
    Rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    Rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    m = np.eye(4)
    m[:3, :3] = Rz @ Rx  # URDF: R = Rz(yaw) Ry(pitch) Rx(roll)
    m[:3, 3] = xyz
    return [float(x) for x in m.reshape(-1)]


def revolute(q_index):
    return {"type": "revolute", "axis": [0.0, 0.0, 1.0], "q_index": q_index}


def robot():
    joints = [("joint1", -6.283185307179586, 6.283185307179586), ("joint2", -2.059, 2.0944),
              ("joint3", -3.927, 0.19198), ("joint4", -6.283185307179586, 6.283185307179586),
              ("joint5", -1.69297, 3.141592653589793), ("joint6", -6.283185307179586, 6.283185307179586)]
    nodes = [
        ("link_base", -1, pose(), {"type": "fixed"}),
        ("link1", 0, pose((0, 0, 0.267)), revolute(0)),
        ("link2", 1, pose(roll=-PI_2), revolute(1)),
        ("link3", 2, pose((0.0535, -0.2845, 0)), revolute(2)),
        ("link4", 3, pose((0.0775, 0.3425, 0), roll=-PI_2), revolute(3)),
        ("link5", 4, pose(roll=PI_2), revolute(4)),
        ("link6", 5, pose((0.076, 0.097, 0), roll=-PI_2), revolute(5)),
        ("link_eef", 6, pose(), {"type": "fixed"}),
        # The fingers are prismatic joints outside the arm: they carry a fixed opening.
        ("left_finger", 7, pose((0, 0.006, 0)), {"type": "prismatic", "axis": [0, 1, 0], "value": 0.03}),
        ("right_finger", 7, pose((0, -0.006, 0)), {"type": "prismatic", "axis": [0, -1, 0], "value": 0.03}),
    ]
    spheres = [
        (0, [0, 0, 0.032], 0.075), (0, [0, 0, 0.095], 0.075),
        (1, [0, 0, -0.117], 0.06), (1, [0, 0, -0.023], 0.06),
        # link2 runs from joint2 to joint3 (0.0535, -0.2845) with a slight bend.
        (2, [0.005, -0.023, 0], 0.056), (2, [0.020, -0.102, 0], 0.056),
        (2, [0.034, -0.181, 0], 0.056), (2, [0.049, -0.261, 0], 0.056),
        # link3, the forearm, along +y at x 0.0775.
        (3, [0.0775, 0.020, 0], 0.05), (3, [0.0775, 0.095, 0], 0.05), (3, [0.0775, 0.170, 0], 0.05),
        (3, [0.0775, 0.245, 0], 0.05), (3, [0.0775, 0.320, 0], 0.05),
        (4, [0, 0, 0], 0.048),
        (5, [0.038, 0.083, 0], 0.043), (5, [0.038, 0.017, 0], 0.043),
        (6, [0, 0, -0.01], 0.041),
        (7, [0, -0.035, 0.06], 0.055), (7, [0, 0.035, 0.06], 0.055),
        (8, [0, 0, 0.145], 0.03), (9, [0, 0, 0.145], 0.03),
    ]
    # Checked pairs: every link pair except neighbours on the chain and pairs that share the
    # wrist (as robot-configs/xarm6/spheres.toml allows), and except base/link1 (fixed together
    # in z).
    names = [n[0] for n in nodes]
    allowed = {("link_base", "link1"), ("link1", "link2"), ("link2", "link3"), ("link3", "link4"),
               ("link3", "link5"), ("link4", "link5"), ("link5", "link6"), ("link5", "link_eef"),
               ("link6", "link_eef"), ("link_eef", "left_finger"), ("link_eef", "right_finger"),
               ("left_finger", "right_finger"), ("link6", "left_finger"), ("link6", "right_finger"),
               ("link4", "link_eef"), ("link4", "left_finger"), ("link4", "right_finger"),
               ("link5", "left_finger"), ("link5", "right_finger"), ("link4", "link6")}
    pairs = [[a, b] for a in range(len(names)) for b in range(a + 1, len(names))
             if (names[a], names[b]) not in allowed and (names[b], names[a]) not in allowed]
    return {
        "name": "xarm6_sample",
        "joints": [{"name": n, "lower": lo, "upper": hi} for n, lo, hi in joints],
        "nodes": [{"link": l, "parent": p, "origin": o, "joint": j} for l, p, o, j in nodes],
        "spheres": [{"node": n, "center": [float(x) for x in c], "radius": r} for n, c, r in spheres],
        "self_pairs": pairs,
    }


def rot_z(deg):
    a = math.radians(deg)
    return [math.cos(a), -math.sin(a), 0.0, math.sin(a), math.cos(a), 0.0, 0.0, 0.0, 1.0]


GRID = {"origin": [0.35, -0.25, 0.15], "voxel": 0.02, "dims": [10, 10, 10], "occupied": (5, 5, 5)}


def scene():
    return {
        "name": "wall_and_shelf",
        "table_z": 0.0,
        "table_margin": 0.005,
        "table_exempt": [0, 1],
        "boxes": [
            {"name": "wall", "center": [0.45, 0.05, 0.20], "rotation": rot_z(20.0),
             "half_extents": [0.02, 0.12, 0.20]},
            {"name": "shelf_board", "center": [0.40, -0.35, 0.45], "rotation": rot_z(0.0),
             "half_extents": [0.15, 0.12, 0.01]},
        ],
        "grid": {"origin": GRID["origin"], "voxel": GRID["voxel"], "dims": GRID["dims"],
                 "file": "scene_sample.f32"},
    }


def grid_values():
    """D per the problem format: distance between this cell's centre and the occupied one's."""
    n = np.array(GRID["dims"])
    idx = np.stack(np.meshgrid(*(np.arange(k) for k in n), indexing="ij"), axis=-1)
    D = GRID["voxel"] * np.linalg.norm(idx - np.array(GRID["occupied"]), axis=-1)
    return D.astype("<f4")  # C order: index ((i*ny + j)*nz + k)


# Start/goal pairs, chosen by hand around the wall (left of it <-> right of it, low) and under
# and over the shelf board; each property below is asserted.
PROBLEMS = [
    # (name, start, goal, what the straight joint-space segment must hit, or False: nothing)
    # left of the wall, gripper down -> right of it
    ("sample/0", [0.6, 0.04, -0.87, 0.0, 0.53, 0.0], [-0.47, 0.06, -0.79, 0.0, 0.55, 0.0], "wall"),
    # left of the wall, low -> above the shelf board
    ("sample/1", [0.68, 0.61, -1.57, 0.0, 1.23, 0.0], [-0.72, 0.39, -2.59, 0.0, 1.82, 0.0], "shelf_board"),
    # under the shelf board, gripper horizontal -> above the board, gripper down
    ("sample/2", [-1.15, 0.79, -1.43, -1.5, -1.46, 0.0], [-0.72, 0.39, -2.59, 0.0, 1.82, 0.0], "shelf_board"),
    # right of the wall, past the occupied voxel
    ("sample/3", [-0.47, 0.06, -0.79, 0.0, 0.55, 0.0], [-0.59, -0.08, -0.52, 0.0, 0.24, 0.0], "depth cloud"),
    # a short free move left of the wall
    ("sample/4", [0.6, 0.04, -0.87, 0.0, 0.53, 0.0], [0.47, 0.14, -1.2, 0.0, 0.88, 0.0], False),
]


def segment_contacts(check, a, b, step=0.01):
    """The set of (kind, other) contacts along the straight joint-space segment a-b."""
    a, b = np.asarray(a), np.asarray(b)
    n = max(1, int(math.ceil(np.linalg.norm(b - a) / step)))
    hits = (check.first_contact((a + (b - a) * (i / n)).tolist()) for i in range(n + 1))
    return sorted({(h[0], h[2]) for h in hits if h})


def main():
    r, s = robot(), scene()
    data = {"robot": r, "resolution": 0.02, "scenes": [s],
            "problems": [{"name": n, "scene": 0, "start": a, "goal": b} for n, a, b, _ in PROBLEMS]}
    values = grid_values()
    check = make_checker(r, dict(s, grid=dict(s["grid"], values=values.reshape(-1))))
    for name, a, b, blocked in PROBLEMS:
        for label, q in (("start", a), ("goal", b)):
            hit = check.first_contact(q)
            assert hit is None, f"{name} {label} is not free: {hit}"
        hits = segment_contacts(check, a, b)
        print(f"{name}: straight segment hits {hits or 'nothing'}")
        assert bool(hits) == bool(blocked), f"{name}: expected the straight segment {'blocked' if blocked else 'free'}"
        assert not blocked or any(o == blocked for _, o in hits), f"{name}: the straight segment misses {blocked}"
    values.tofile(os.path.join(HERE, "scene_sample.f32"))
    with open(os.path.join(HERE, "sample.json"), "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    print(f"wrote {os.path.join(HERE, 'sample.json')} ({len(r['spheres'])} spheres, "
          f"{len(r['self_pairs'])} self pairs, {len(PROBLEMS)} problems) and scene_sample.f32")


if __name__ == "__main__":
    main()
