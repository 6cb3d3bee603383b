#!/usr/bin/env python3
"""TRAC-IK peer for `pointact bench ik`.

Requirements (nothing is installed by this script):

    pip install pytracik==0.0.3 numpy

pytracik 0.0.3 ships manylinux wheels with Boost, NLopt and Orocos KDL bundled, so no system
packages are needed on x86_64 Linux (CPython 3.9-3.13).

Usage:

    python3 benches/ik_peer.py REQUEST.json

REQUEST.json:
    {"urdf": "path/to/robot.urdf",          # path, relative to the current directory or absolute
     "base_link": "link_base", "tip_link": "link_tcp",
     "arm_joints": ["joint1", ...],          # order of `seed` (the chain order is taken from the URDF)
     "seed": [q0, ...],                      # rad, used as the seed for every target
     "targets": [[16 floats], ...],          # row-major 4x4 base_from_tip, metres
     "timeout_s": 0.005,                     # TRAC-IK time budget per solve
     "eps": 1e-5}                            # TRAC-IK convergence tolerance

Output: exactly one JSON line on stdout,

    {"solver": "pytracik 0.0.3", "n": N, "success": k,
     "median_ms": ..., "p99_ms": ..., "mean_ms": ...}

n = number of targets; success = solves that TRAC-IK reported as found AND whose solution, put
through pytracik's own FK (KDL), lands within 1e-4 m and 0.05 deg (8.7e-4 rad) of the target.
Times are wall-clock per solve (time.perf_counter around the pytracik.ik call only; quaternion
conversion and verification are outside), over all N solves, failed ones included.
p99 uses numpy's default (linear) percentile. A summary of failures goes to stderr.

Exit codes: 0 ok; 3 pytracik cannot be imported (stdout: {"error": "..."}); 2 any other error
(bad request, unknown link, joint mismatch; stdout: {"error": "..."}).

The solver is TRAC-IK's default SolveType.Speed (return the first solution within eps).
"""

import json
import sys
import time
import xml.etree.ElementTree as ET

POS_TOL_M = 1e-4
ROT_TOL_RAD = 0.05 * 3.141592653589793 / 180.0  # 8.73e-4 rad


def fail(msg, code):
    print(json.dumps({"error": msg}))
    sys.exit(code)


try:
    import numpy as np
    import pytracik  # the compiled binding: TRAC_IK, ik, fk, get_num_joints, ...
except Exception as e:  # ImportError, or a missing bundled shared library
    fail(f"pytracik unavailable: {type(e).__name__}: {e}", 3)

try:
    from trac_ik import __version__ as PYTRACIK_VERSION  # pure-Python half of the same wheel
except Exception:
    try:
        from importlib.metadata import version

        PYTRACIK_VERSION = version("pytracik")
    except Exception:
        PYTRACIK_VERSION = "unknown"


def chain_joints(urdf_text, base_link, tip_link):
    """Movable joints from base_link to tip_link, base first (the KDL chain order)."""
    root = ET.fromstring(urdf_text)
    parent_joint = {j.find("child").get("link"): j for j in root.findall("joint")}
    names, link = [], tip_link
    while link != base_link:
        if link not in parent_joint:
            raise ValueError(f"link {tip_link!r} is not below {base_link!r} in the URDF")
        j = parent_joint[link]
        if j.get("type") != "fixed":
            names.append(j.get("name"))
        link = j.find("parent").get("link")
    return names[::-1]


def quat_xyzw(R):
    """Unit quaternion (x, y, z, w) of a rotation matrix (Shepperd's method)."""
    t = R[0, 0] + R[1, 1] + R[2, 2]
    if t > 0:
        s = 2.0 * np.sqrt(t + 1.0)
        w, x, y, z = 0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2])
        w, x, y, z = (R[2, 1] - R[1, 2]) / s, 0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s
    elif R[1, 1] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2])
        w, x, y, z = (R[0, 2] - R[2, 0]) / s, (R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s
    else:
        s = 2.0 * np.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1])
        w, x, y, z = (R[1, 0] - R[0, 1]) / s, (R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s
    q = np.array([x, y, z, w])
    return q / np.linalg.norm(q)


def rot_angle(Ra, Rb):
    """Angle [rad] of Ra^T Rb."""
    c = (np.trace(Ra.T @ Rb) - 1.0) / 2.0
    return float(np.arccos(np.clip(c, -1.0, 1.0)))


def main():
    if len(sys.argv) != 2:
        fail("usage: ik_peer.py REQUEST.json", 2)
    try:
        with open(sys.argv[1]) as f:
            req = json.load(f)
        with open(req["urdf"]) as f:
            urdf_text = f.read()
        base, tip = req["base_link"], req["tip_link"]
        arm = list(req["arm_joints"])
        seed_arm = np.asarray(req["seed"], dtype=float)
        targets = np.asarray(req["targets"], dtype=float).reshape(-1, 4, 4)
        timeout_s = float(req.get("timeout_s", 0.005))
        eps = float(req.get("eps", 1e-5))
        chain = chain_joints(urdf_text, base, tip)
        if sorted(chain) != sorted(arm):
            raise ValueError(f"arm_joints {arm} != movable joints {chain} between {base} and {tip}")
        if seed_arm.shape != (len(arm),):
            raise ValueError(f"seed has {seed_arm.size} values, arm_joints has {len(arm)}")
        # arm_joints order -> KDL chain order
        perm = [arm.index(jn) for jn in chain]
        seed = seed_arm[perm].copy()
        solver = pytracik.TRAC_IK(base, tip, urdf_text, timeout_s, eps, pytracik.SolveType.Speed)
        if pytracik.get_num_joints(solver) != len(chain):
            raise ValueError(f"TRAC-IK chain has {pytracik.get_num_joints(solver)} joints, expected {len(chain)}")
    except SystemExit:
        raise
    except Exception as e:
        fail(f"{type(e).__name__}: {e}", 2)

    # Warm-up (first call allocates); not timed, not counted.
    if len(targets):
        pytracik.ik(solver, seed, *(float(v) for v in targets[0][:3, 3]), *(float(v) for v in quat_xyzw(targets[0][:3, :3])))

    times_ms, success = [], 0
    n_reported, n_bad_fk = 0, 0
    worst_p = worst_r = 0.0
    for T in targets:
        x, y, z = (float(v) for v in T[:3, 3])
        qx, qy, qz, qw = (float(v) for v in quat_xyzw(T[:3, :3]))
        t0 = time.perf_counter()
        r = pytracik.ik(solver, seed, x, y, z, qx, qy, qz, qw)
        t1 = time.perf_counter()
        times_ms.append((t1 - t0) * 1e3)
        if r[0] < 0:  # TRAC-IK return code: number of solutions found, < 0 on failure
            continue
        n_reported += 1
        q = np.asarray(r[1:], dtype=float)
        F = np.asarray(pytracik.fk(solver, q))
        dp = float(np.linalg.norm(F[:3, 3] - T[:3, 3]))
        dr = rot_angle(F[:3, :3], T[:3, :3])
        if dp <= POS_TOL_M and dr <= ROT_TOL_RAD:
            success += 1
            worst_p, worst_r = max(worst_p, dp), max(worst_r, dr)
        else:
            n_bad_fk += 1

    t = np.asarray(times_ms) if times_ms else np.zeros(1)
    print(
        f"ik_peer: {len(targets)} targets, TRAC-IK reported {n_reported} found, {n_bad_fk} of those failed the "
        f"FK check; worst accepted error {worst_p:.3g} m / {worst_r:.3g} rad; "
        f"timeout_s={timeout_s} eps={eps}",
        file=sys.stderr,
    )
    print(json.dumps({
        "solver": f"pytracik {PYTRACIK_VERSION}",
        "n": int(len(targets)),
        "success": int(success),
        "median_ms": float(np.median(t)),
        "p99_ms": float(np.percentile(t, 99)),
        "mean_ms": float(np.mean(t)),
    }))


if __name__ == "__main__":
    main()
