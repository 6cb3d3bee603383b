#!/usr/bin/env python3
"""Sphere collision model of `pointact bench plan`, the peer side (numpy).

The Rust planner and this file implement the same model, so that OMPL (through this file's
checker) and pointact search the same free space; a test compares the two on random
configurations. Every rule below is therefore spelled out to the comparison operator, with the
arithmetic in the order it is done here (all in f64; grid distances are widened from f32).

Forward kinematics (nodes in topological order, parent before child):
    T_i = T_parent * origin_i * M_i            (T_parent = identity for parent -1)
    M_i = rotation about the unit axis by q    revolute / continuous
          translation unit_axis * q            prismatic
          identity                             fixed
    The axis is normalised (as the Rust side does for URDF axes). An arm joint reads q[q_index];
    any other joint uses its fixed "value" (0 when absent).
    World sphere centre = T_node * center; radius unchanged.
    (Evaluated with constant transforms pre-multiplied, see _Kinematics: the same poses up to
    floating-point rounding, about 1e-16 m.)

In the table, box and cloud rules r is the sphere's radius plus the robot's "padding" (0 when
absent), and spheres of nodes in the scene's table_exempt (links fixed to the base) are skipped by
all three; the self rule uses the bare radii. This is pointact's planning::Checker.

A configuration is invalid when, checked in this order (first_contact reports the first):
    limit  q[j] outside [lower, upper] (or not finite)    -> ("limit", joint name, "joint limits")
    table  c_z - r < table_z + table_margin, for every sphere whose node is not in table_exempt
                                                          -> ("table", link, "table")
    box    p = R^T (c - center); e = max(|p| - h, 0) per axis; sqrt(e_x^2 + e_y^2 + e_z^2) < r
                                                          -> ("box", link, box name)
    cloud  idx = floor((c - origin) / v) per axis; outside [0, dims) on any axis: free; else
           cc = origin + (idx + 0.5) * v, h = v * sqrt(3) / 2,
           contact if (D[idx] - |c - cc|) - h < r        -> ("cloud", link, "depth cloud")
    self   for each listed node pair (a, b), any sphere of a vs any sphere of b:
           |c_a - c_b| < r_a + r_b                        -> ("self", link_a, link_b)
    Norms are sqrt(x*x + y*y + z*z). Within one kind the order is: spheres in file order, then
    boxes in file order (sphere-major); self pairs in file order, then a's spheres, then b's.
    Exactly on a boundary is free (every rule is a strict "<"). A NaN distance compares false,
    so it is free, as in Rust.

Usage: `python3 model.py --selftest` checks FK and every rule at, just inside and just outside
its boundary.
"""

import math
import os
import sys

import numpy as np

_SQRT3_2 = math.sqrt(3.0) / 2.0


def _skew(a):
    return np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])


def _joint_factors(joint, where):
    """(P, Q, revolute) with origin * M(x) = O + a(x) O P + b(x) O Q, where for a revolute joint
    a = sin x, b = 1 - cos x (Rodrigues: R = I + sin x K + (1 - cos x) K^2, K the cross-product
    matrix of the unit axis) and for a prismatic one a = x, b unused (P puts the axis in the
    translation column). Fixed joints have P = Q = 0."""
    jtype = joint.get("type", "fixed")
    P, Q = np.zeros((4, 4)), np.zeros((4, 4))
    if jtype == "fixed":
        return P, Q, False
    if jtype not in ("revolute", "continuous", "prismatic"):
        raise ValueError(f"{where}: unknown joint type {jtype!r}")
    axis = np.asarray(joint["axis"], dtype=float)
    n = float(np.linalg.norm(axis))
    if not n > 0.0:
        raise ValueError(f"{where}: zero joint axis")
    axis = axis / n
    if jtype == "prismatic":
        P[:3, 3] = axis
        return P, Q, False
    P[:3, :3] = _skew(axis)
    Q = P @ P
    return P, Q, True


class _Kinematics:
    """FK reduced to the nodes that move with q.

    A Python-called checker pays a few microseconds per numpy call, so the work is shaped to
    need few calls: every node whose transform is constant (fixed joints, non-arm joints at
    their value, and the chain from the world to the first moving joint) is folded into its
    nearest moving ancestor ("anchor", or the world). Then each call computes all moving local
    transforms in one broadcast and chains one 4x4 product per moving node, and every sphere
    centre is its anchor's pose times a precomputed anchor-frame centre.
    """

    def __init__(self, nodes, dof):
        self.links = [n["link"] for n in nodes]
        n_nodes = len(nodes)
        anchor = [0] * n_nodes            # moving-node slot, or -1 for the world
        anchor_from_node = [None] * n_nodes
        moving, mov_parent, O_l, P_l, Q_l, rev_l, qi_l = [], [], [], [], [], [], []
        for i, spec in enumerate(nodes):
            parent = int(spec["parent"])
            if not -1 <= parent < i:
                raise ValueError(f"node {i} ({spec['link']}): parent {parent} is not an earlier node")
            origin = np.asarray(spec["origin"], dtype=float).reshape(4, 4)
            joint = spec.get("joint") or {"type": "fixed"}
            P, Q, revolute = _joint_factors(joint, f"node {i} ({spec['link']})")
            # Frame of the parent in its anchor's frame.
            a_parent = anchor[parent] if parent >= 0 else -1
            A = anchor_from_node[parent] if parent >= 0 else np.eye(4)
            q_index = joint.get("q_index") if joint.get("type", "fixed") != "fixed" else None
            if q_index is None:
                x = float(joint.get("value", 0.0))
                a = math.sin(x) if revolute else x
                b = 1.0 - math.cos(x)
                local = origin + a * (origin @ P) + b * (origin @ Q)
                anchor[i], anchor_from_node[i] = a_parent, A @ local
            else:
                q_index = int(q_index)
                if not 0 <= q_index < dof:
                    raise ValueError(f"node {i} ({spec['link']}): q_index {q_index} out of range")
                AO = A @ origin
                O_l.append(AO)
                P_l.append(AO @ P)
                Q_l.append(AO @ Q)
                rev_l.append(revolute)
                qi_l.append(q_index)
                mov_parent.append(a_parent)
                anchor[i], anchor_from_node[i] = len(moving), np.eye(4)
                moving.append(i)
        self.n_moving = len(moving)
        self.anchor = np.array([a if a >= 0 else self.n_moving for a in anchor], dtype=np.intp)
        self.anchor_from_node = np.array(anchor_from_node).reshape(n_nodes, 4, 4)
        self.O = np.array(O_l).reshape(-1, 4, 4)
        self.P = np.array(P_l).reshape(-1, 4, 4)
        self.Q = np.array(Q_l).reshape(-1, 4, 4)
        self.revolute = np.array(rev_l, dtype=bool)
        self.q_index = np.array(qi_l, dtype=np.intp)
        # Chain steps: (slot, parent slot or -1). The last slot of the pose array is the world.
        self.steps = list(zip(range(self.n_moving), mov_parent))
        self._T = np.empty((self.n_moving + 1, 4, 4))
        self._T[self.n_moving] = np.eye(4)

    def anchor_poses(self, q):
        """World poses of the moving nodes (plus the identity world slot last); reused buffer."""
        x = np.asarray(q, dtype=float)[self.q_index]
        a = np.where(self.revolute, np.sin(x), x)[:, None, None]
        b = (1.0 - np.cos(x))[:, None, None]  # Q is zero for prismatic joints
        L = self.O + a * self.P + b * self.Q
        T = self._T
        for slot, parent in self.steps:
            if parent < 0:
                T[slot] = L[slot]
            else:
                np.matmul(T[parent], L[slot], out=T[slot])
        return T

    def node_poses(self, q):
        """World pose of every node (debugging and tests; not on the fast path)."""
        T = self.anchor_poses(q)
        return np.matmul(T[self.anchor], self.anchor_from_node)


class Checker:
    """State validity for one robot in one scene. `checker(q)` is True when q is free."""

    def __init__(self, robot, scene, base_dir=None):
        joints = robot["joints"]
        self.joint_names = [j["name"] for j in joints]
        self.lower = [float(j["lower"]) for j in joints]
        self.upper = [float(j["upper"]) for j in joints]
        self.dof = len(joints)
        self.kin = _Kinematics(robot["nodes"], self.dof)
        self.link_names = self.kin.links

        spheres = robot["spheres"]
        s_node = np.array([int(s["node"]) for s in spheres], dtype=np.intp)
        if len(s_node) and not (0 <= s_node.min() and s_node.max() < len(self.link_names)):
            raise ValueError("a sphere names a node that does not exist")
        self.s_node = s_node
        local = np.array([list(map(float, s["center"])) + [1.0] for s in spheres]).reshape(-1, 4)
        # Centres in their anchor's frame, as (S, 4, 1) columns for one batched product.
        self.s_anchor = self.kin.anchor[s_node]
        self.s_local = np.matmul(self.kin.anchor_from_node[s_node], local[:, :, None])
        self.s_r = np.array([float(s["radius"]) for s in spheres])
        # World checks (table, boxes, grid) grow every sphere by the robot's padding; exempt
        # (grounded) spheres skip all three. Self pairs use the bare radii.
        pad = float(robot.get("padding", 0.0))
        exempt = set(int(i) for i in scene.get("table_exempt", []))
        self.w_r = np.where([int(n) in exempt for n in s_node], -np.inf, self.s_r + pad) if len(s_node) else self.s_r

        # Table: an exempt sphere gets radius -inf here, so c_z - r = +inf never passes "<".
        self.table_limit = float(scene.get("table_z", 0.0)) + float(scene.get("table_margin", 0.0))
        self.table_r = self.w_r
        self.has_table = bool(len(s_node)) and bool(np.isfinite(self.table_r).any())

        # Boxes, stacked so all sphere/box pairs are tested in one broadcast: (B, S, 3).
        boxes = scene.get("boxes", []) or []
        self.box_names = [b["name"] for b in boxes]
        self.box_c = np.array([b["center"] for b in boxes], dtype=float).reshape(-1, 1, 3)
        self.box_R = np.array([b["rotation"] for b in boxes], dtype=float).reshape(-1, 3, 3)
        self.box_h = np.array([b["half_extents"] for b in boxes], dtype=float).reshape(-1, 1, 3)

        # Distance grid.
        self.grid = None
        g = scene.get("grid")
        if g:
            dims = tuple(int(d) for d in g["dims"])
            if "values" in g:  # already loaded (tests); else read the file next to the JSON
                values = np.asarray(g["values"], dtype="<f4")
            else:
                values = np.fromfile(os.path.join(base_dir or ".", g["file"]), dtype="<f4")
            if values.size != dims[0] * dims[1] * dims[2]:
                raise ValueError(f"grid: {values.size} values for dims {dims}")
            self.grid_D = values.reshape(-1)  # flat, index ((i*ny + j)*nz + k)
            self.grid_origin = np.asarray(g["origin"], dtype=float)
            self.grid_v = float(g["voxel"])
            self.grid_dims = np.array(dims, dtype=float)
            self.grid_stride = np.array([dims[1] * dims[2], dims[2], 1], dtype=np.intp)
            self.grid_h = self.grid_v * _SQRT3_2
            self.grid = True

        # Self pairs expanded to sphere index pairs, in the documented order.
        ia, ib, pair_of = [], [], []
        by_node = {}
        for i, n in enumerate(s_node):
            by_node.setdefault(int(n), []).append(i)
        self.self_pairs = [(int(a), int(b)) for a, b in robot.get("self_pairs", [])]
        for p, (a, b) in enumerate(self.self_pairs):
            for i in by_node.get(a, []):
                for j in by_node.get(b, []):
                    ia.append(i)
                    ib.append(j)
                    pair_of.append(p)
        self.self_a = np.array(ia, dtype=np.intp)
        self.self_b = np.array(ib, dtype=np.intp)
        self.self_rsum = self.s_r[self.self_a] + self.s_r[self.self_b]
        self.self_pair_of = pair_of

    # ---- kinematics -------------------------------------------------------------------------

    def link_poses(self, q):
        """World pose (4x4) of every node, in node order."""
        return self.kin.node_poses(q)

    def sphere_centres(self, q):
        """World centres (S, 3) of all spheres at q."""
        T = self.kin.anchor_poses(q)
        return np.matmul(T[self.s_anchor, :3, :], self.s_local)[:, :, 0]

    # ---- the rules, each returning a boolean hit array ------------------------------------------

    def _in_limits(self, q):
        if len(q) != self.dof:
            raise ValueError(f"q has {len(q)} values, the robot {self.dof} joints")
        for x, lo, hi in zip(q, self.lower, self.upper):
            if not lo <= x <= hi:  # NaN fails too
                return False
        return True

    def _table_hits(self, c):
        return c[:, 2] - self.table_r < self.table_limit  # (S,)

    def _box_hits(self, c):
        # Row vector d times R is R^T d: p = R^T (c - center), batched over boxes.
        p = np.matmul(c[None, :, :] - self.box_c, self.box_R)
        e = np.maximum(np.abs(p) - self.box_h, 0.0)
        # sum over 3 elements adds left to right: ((e_x^2 + e_y^2) + e_z^2), like the Rust norm.
        return np.sqrt((e * e).sum(axis=2)) < self.w_r  # (B, S)

    def _grid_hits(self, c):
        f = np.floor((c - self.grid_origin) / self.grid_v)
        # Compare the floored floats before any integer cast: huge or NaN centres stay outside.
        inside = ((f >= 0.0) & (f < self.grid_dims)).all(axis=1)
        if not inside.any():
            return inside
        fi = f[inside]
        D = self.grid_D[(fi.astype(np.intp) * self.grid_stride).sum(axis=1)].astype(np.float64)
        w = c[inside] - (self.grid_origin + (fi + 0.5) * self.grid_v)
        hits = np.zeros(len(c), dtype=bool)
        hits[inside] = D - np.sqrt((w * w).sum(axis=1)) - self.grid_h < self.w_r[inside]
        return hits

    def _self_hits(self, c):
        w = c[self.self_a] - c[self.self_b]
        return np.sqrt((w * w).sum(axis=1)) < self.self_rsum

    # ---- public API ---------------------------------------------------------------------------

    def __call__(self, q):
        """True when q is within the joint limits and collision-free."""
        if not self._in_limits(q):
            return False
        c = self.sphere_centres(q)
        # Any order gives the same answer; cheapest first.
        if self.has_table and self._table_hits(c).any():
            return False
        if self.box_names and self._box_hits(c).any():
            return False
        if self.grid and self._grid_hits(c).any():
            return False
        if len(self.self_a) and self._self_hits(c).any():
            return False
        return True

    def first_contact(self, q):
        """None when q is valid, else (kind, link_name, other_name) of the first violated rule."""
        if not self._in_limits(q):
            for name, x, lo, hi in zip(self.joint_names, q, self.lower, self.upper):
                if not lo <= x <= hi:
                    return ("limit", name, "joint limits")
        c = self.sphere_centres(q)

        def link(s):
            return self.link_names[self.s_node[s]]

        if self.has_table:
            h = np.flatnonzero(self._table_hits(c))
            if h.size:
                return ("table", link(h[0]), "table")
        if self.box_names:
            h = np.argwhere(self._box_hits(c).T)  # (S, B), row-major: sphere-major order
            if h.size:
                return ("box", link(h[0, 0]), self.box_names[h[0, 1]])
        if self.grid:
            h = np.flatnonzero(self._grid_hits(c))
            if h.size:
                return ("cloud", link(h[0]), "depth cloud")
        if len(self.self_a):
            h = np.flatnonzero(self._self_hits(c))
            if h.size:
                a, b = self.self_pairs[self.self_pair_of[h[0]]]
                return ("self", self.link_names[a], self.link_names[b])
        return None


def make_checker(robot, scene, base_dir=None):
    """The validity callable for `robot` in `scene` (grid file read relative to base_dir).

    The result is callable as checker(q) -> bool and has .first_contact(q) for debugging.
    """
    return Checker(robot, scene, base_dir)


# ---- self-test --------------------------------------------------------------------------------

def _eye():
    return [float(x) for x in np.eye(4).reshape(-1)]


def _translation(x, y, z):
    m = np.eye(4)
    m[:3, 3] = (x, y, z)
    return [float(v) for v in m.reshape(-1)]


def _rodrigues(axis, angle):
    a = np.asarray(axis, dtype=float) / np.linalg.norm(axis)
    K = _skew(a)
    return np.eye(3) + math.sin(angle) * K + (1.0 - math.cos(angle)) * (K @ K)


def _gantry(extra_spheres=(), self_pairs=()):
    """Three prismatic arm joints x, y, z: the sphere on node 3 sits exactly at (q0, q1, q2),
    with no rounding, so boundaries can be hit to the last bit."""
    nodes = [{"link": "base", "parent": -1, "origin": _eye(), "joint": {"type": "fixed"}}]
    for k, name in enumerate(("x", "y", "z")):
        axis = [0.0, 0.0, 0.0]
        axis[k] = 1.0
        nodes.append({"link": "slide_" + name, "parent": k, "origin": _eye(),
                      "joint": {"type": "prismatic", "axis": axis, "q_index": k}})
    joints = [{"name": "j" + n, "lower": -10.0, "upper": 10.0} for n in "xyz"]
    spheres = [{"node": 3, "center": [0.0, 0.0, 0.0], "radius": 0.25}] + list(extra_spheres)
    return {"name": "gantry", "joints": joints, "nodes": nodes, "spheres": spheres,
            "self_pairs": [list(p) for p in self_pairs]}


def _selftest():
    failures = []

    def expect(name, got, want):
        ok = got == want
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {got!r}" + ("" if ok else f" (want {want!r})"))
        if not ok:
            failures.append(name)

    def close(name, got, want, tol=1e-12):
        err = float(np.max(np.abs(np.asarray(got, dtype=float) - np.asarray(want, dtype=float))))
        expect(f"{name} (err {err:.1e})", err <= tol, True)

    # FK: joint1 at z 0.267 about z; a child 0.1 m along x of it; a prismatic finger on the child
    # whose axis (0, 2, 0) must be normalised; a joint about the unnormalised axis (1, 1, 0).
    robot = {
        "joints": [{"name": "joint1", "lower": -7.0, "upper": 7.0},
                   {"name": "joint2", "lower": -7.0, "upper": 7.0}],
        "nodes": [
            {"link": "base", "parent": -1, "origin": _eye(), "joint": {"type": "fixed"}},
            {"link": "link1", "parent": 0, "origin": _translation(0, 0, 0.267),
             "joint": {"type": "revolute", "axis": [0, 0, 1], "q_index": 0}},
            {"link": "tip", "parent": 1, "origin": _translation(0.1, 0, 0), "joint": {"type": "fixed"}},
            {"link": "finger", "parent": 2, "origin": _eye(),
             "joint": {"type": "prismatic", "axis": [0, 2, 0], "value": 0.04}},
            {"link": "tilt", "parent": 0, "origin": _eye(),
             "joint": {"type": "continuous", "axis": [1, 1, 0], "q_index": 1}},
        ],
        "spheres": [{"node": 2, "center": [0, 0, 0], "radius": 0.01},
                    {"node": 3, "center": [0, 0, 0], "radius": 0.01},
                    {"node": 4, "center": [0, 0, 1], "radius": 0.01},
                    {"node": 4, "center": [1, 0, 0], "radius": 0.01}],
    }
    ck = make_checker(robot, {"table_z": -5.0})
    c = ck.sphere_centres([math.pi / 2, math.pi])
    # Rotating (0.1, 0, 0) by +90 deg about z gives (0, 0.1, 0); plus the 0.267 lift.
    close("fk revolute: tip at q1=pi/2", c[0], [0.0, 0.1, 0.267])
    # The finger slides 0.04 along the tip's local y, which joint1 turned into world -x.
    close("fk prismatic (axis normalised): finger", c[1], [-0.04, 0.1, 0.267])
    # Half a turn about (1,1,0)/sqrt2 maps z to -z and x to y.
    close("fk axis (1,1,0) by pi: (0,0,1)", c[2], [0.0, 0.0, -1.0])
    close("fk axis (1,1,0) by pi: (1,0,0)", c[3], [0.0, 1.0, 0.0])
    c = ck.sphere_centres([0.3, 0.0])
    close("fk revolute: tip at q1=0.3", c[0], [0.1 * math.cos(0.3), 0.1 * math.sin(0.3), 0.267])

    # FK against the definition written out naively (Rodrigues matrix built per call, T_parent *
    # origin * M) on a random chain with tilted axes and origins, at random q.
    rng = np.random.default_rng(7)
    chain = {"joints": [{"name": f"j{k}", "lower": -7.0, "upper": 7.0} for k in range(4)],
             "nodes": [{"link": "base", "parent": -1, "origin": _eye(), "joint": {"type": "fixed"}}],
             "spheres": []}
    for k in range(4):
        a = rng.normal(size=3)
        Rk = _rodrigues(rng.normal(size=3), rng.uniform(-3, 3))
        Ok = np.eye(4)
        Ok[:3, :3], Ok[:3, 3] = Rk, rng.normal(size=3) * 0.3
        jt = "prismatic" if k == 2 else "revolute"
        chain["nodes"].append({"link": f"l{k}", "parent": k, "origin": Ok.reshape(-1).tolist(),
                               "joint": {"type": jt, "axis": a.tolist(), "q_index": k}})
        chain["spheres"].append({"node": k + 1, "center": (rng.normal(size=3) * 0.1).tolist(), "radius": 0.01})
    ck = make_checker(chain, {"table_z": -100.0})
    worst = 0.0
    for _ in range(200):
        q = rng.uniform(-3, 3, size=4)
        T = np.eye(4)
        want = []
        for k in range(4):
            n = chain["nodes"][k + 1]
            M = np.eye(4)
            a = np.asarray(n["joint"]["axis"]) / np.linalg.norm(n["joint"]["axis"])
            if n["joint"]["type"] == "prismatic":
                M[:3, 3] = a * q[k]
            else:
                M[:3, :3] = _rodrigues(a, q[k])
            T = T @ np.asarray(n["origin"]).reshape(4, 4) @ M
            want.append((T @ np.append(chain["spheres"][k]["center"], 1.0))[:3])
        worst = max(worst, float(np.max(np.abs(ck.sphere_centres(q.tolist()) - np.array(want)))))
    close("fk random chain vs naive Rodrigues", [worst], [0.0], tol=1e-12)

    eps = 1e-9
    # Limits: inclusive bounds.
    g = _gantry()
    ck = make_checker(g, {"table_z": -100.0})
    expect("limit: q at upper bound is valid", ck([10.0, 0.0, 0.0]), True)
    expect("limit: just above upper", ck.first_contact([10.0 + eps, 0.0, 0.0]), ("limit", "jx", "joint limits"))
    expect("limit: NaN", ck([0.0, float("nan"), 0.0]), False)

    # Table: sphere r 0.25 at z; limit 0.0625 + 0.0625 = 0.125, so z = 0.375 is the boundary.
    scene = {"table_z": 0.0625, "table_margin": 0.0625, "table_exempt": []}
    ck = make_checker(g, scene)
    expect("table: exactly at boundary -> free", ck.first_contact([0.0, 0.0, 0.375]), None)
    expect("table: just inside -> contact", ck.first_contact([0.0, 0.0, 0.375 - eps]), ("table", "slide_z", "table"))
    expect("table: just outside -> free", ck([0.0, 0.0, 0.375 + eps]), True)
    scene_ex = dict(scene, table_exempt=[3])
    expect("table: exempt node deep in the table -> free", make_checker(g, scene_ex)([0.0, 0.0, -1.0]), True)

    # Box: centre (1, 0, 2), half extents 0.25; sphere r 0.25 on the x axis, boundary at x = 0.5.
    box = {"name": "cube", "center": [1.0, 0.0, 2.0], "rotation": [1, 0, 0, 0, 1, 0, 0, 0, 1],
           "half_extents": [0.25, 0.25, 0.25]}
    ck = make_checker(g, {"table_z": -100.0, "boxes": [box]})
    expect("box: exactly at boundary -> free", ck.first_contact([0.5, 0.0, 2.0]), None)
    expect("box: just inside -> contact", ck.first_contact([0.5 + eps, 0.0, 2.0]), ("box", "slide_z", "cube"))
    expect("box: just outside -> free", ck([0.5 - eps, 0.0, 2.0]), True)
    expect("box: centre inside the box (d = 0) -> contact", ck([1.0, 0.0, 2.0]), False)
    # Corner region: e = (0.125, 0.125, 0) from the box, |e| = 0.1768 < 0.25 -> contact.
    expect("box: near a corner edge -> contact", ck([1.375, 0.375, 2.0]), False)
    # Rotated box: 90 deg about z maps local x (half 0.5) to world y. Its +y face is at 0.5, so a
    # sphere centred at y = 0.75 just touches it, and its +x face is at world x 1.25 (local y half 0.25), so
    # x = 1.5 is that face's boundary.
    rot = {"name": "turned", "center": [1.0, 0.0, 2.0], "rotation": [0, -1, 0, 1, 0, 0, 0, 0, 1],
           "half_extents": [0.5, 0.25, 0.25]}
    ck = make_checker(g, {"table_z": -100.0, "boxes": [rot]})
    expect("box rotated: boundary on the long face -> free", ck([1.0, 0.75, 2.0]), True)
    expect("box rotated: just inside on the long face -> contact", ck([1.0, 0.75 - eps, 2.0]), False)
    expect("box rotated: just outside the short face -> free", ck([1.5 + eps, 0.0, 2.0]), True)
    expect("box rotated: just inside the short face -> contact", ck([1.5 - eps, 0.0, 2.0]), False)

    # A 30 degree turn tells R from R^T (a quarter turn cannot: the box is symmetric under it).
    # Just beyond the local +x face, along the box's own x axis: sphere offset 0.75 +- eps.
    a30 = math.radians(30.0)
    R30 = [math.cos(a30), -math.sin(a30), 0.0, math.sin(a30), math.cos(a30), 0.0, 0.0, 0.0, 1.0]
    ck = make_checker(g, {"table_z": -100.0, "boxes": [dict(rot, rotation=R30)]})
    along = lambda t: [1.0 + t * math.cos(a30), t * math.sin(a30), 2.0]
    expect("box turned 30 deg: just inside the local +x face -> contact", ck(along(0.75 - eps)), False)
    expect("box turned 30 deg: just outside the local +x face -> free", ck(along(0.75 + eps)), True)

    # Grid: 4x5x6 cells of 0.25 at origin (-1, -1, -1), cell (1, 2, 3) occupied (unequal dims and
    # an asymmetric cell, so a wrong index order cannot pass); D from the definition.
    dims, v, origin = (4, 5, 6), 0.25, np.array([-1.0, -1.0, -1.0])
    occ = np.array([1, 2, 3])
    idx = np.stack(np.meshgrid(*(np.arange(k) for k in dims), indexing="ij"), axis=-1)
    D = (v * np.linalg.norm(idx - occ, axis=-1)).astype("<f4")
    # Written the way the format states it: value of cell (i, j, k) at ((i*ny + j)*nz + k).
    flat = np.empty(D.size, dtype="<f4")
    for i, j, k in np.ndindex(*dims):
        flat[(i * dims[1] + j) * dims[2] + k] = D[i, j, k]
    grid = {"origin": origin.tolist(), "voxel": v, "dims": list(dims), "values": flat}
    h = v * _SQRT3_2
    # Sphere centred in cell (3, 2, 3): D = 0.5, |c - cc| = 0.
    cc = origin + (np.array([3, 2, 3]) + 0.5) * v
    r_b = float(np.float32(0.5)) - 0.0 - h  # the boundary radius, in the rule's own arithmetic
    for label, r, want in (("exactly at boundary -> free", r_b, None),
                           ("just inside -> contact", r_b + eps, ("cloud", "slide_z", "depth cloud")),
                           ("just outside -> free", r_b - eps, None)):
        gg = _gantry()
        gg["spheres"][0]["radius"] = r
        ck = make_checker(gg, {"table_z": -100.0, "grid": grid})
        expect(f"grid: {label}", ck.first_contact(cc.tolist()), want)
    ck = make_checker(_gantry(), {"table_z": -100.0, "grid": grid})
    occ_c = (origin + (occ + 0.5) * v).tolist()
    expect("grid: centre in the occupied cell -> contact", ck(occ_c), False)
    # The far faces of the grid are outside: x = origin + dims*v exactly is cell 4 -> free, while
    # the same sphere just inside cell (3, 2, 3) is 0.125 from its centre: 0.5 - 0.125 - h < 0.25.
    far = origin[0] + dims[0] * v
    expect("grid: x on the far face is outside the grid -> free", ck([far, cc[1], cc[2]]), True)
    expect("grid: x just below the far face -> inside, contact", ck([far - eps, cc[1], cc[2]]), False)
    expect("grid: below the near face -> free", ck([-1.0 - eps, cc[1], cc[2]]), True)
    # Index order: only the occupied cell holds a finite D (0). Its permutation (3, 2, 1) is free.
    only = np.full(D.size, np.inf, dtype="<f4")
    only[(occ[0] * dims[1] + occ[1]) * dims[2] + occ[2]] = 0.0
    small = _gantry()
    small["spheres"][0]["radius"] = 0.01
    ck = make_checker(small, {"table_z": -100.0, "grid": dict(grid, values=only)})
    expect("grid: index ((i*ny + j)*nz + k): cell (1, 2, 3) -> contact", ck(occ_c), False)
    expect("grid: index order: cell (3, 2, 1) -> free", ck((origin + (np.array([3, 2, 1]) + 0.5) * v).tolist()), True)
    expect("grid: +inf distance -> free", ck((origin + 0.5 * v).tolist()), True)

    # Self: a second sphere (r 0.25) on the base at (2, 0, 0); pair (0, 3); boundary at x = 1.5.
    gs = _gantry(extra_spheres=[{"node": 0, "center": [2.0, 0.0, 0.0], "radius": 0.25}], self_pairs=[(0, 3)])
    ck = make_checker(gs, {"table_z": -100.0})
    expect("self: exactly at boundary -> free", ck.first_contact([1.5, 0.0, 0.0]), None)
    expect("self: just inside -> contact", ck.first_contact([1.5 + eps, 0.0, 0.0]), ("self", "base", "slide_z"))
    expect("self: just outside -> free", ck([1.5 - eps, 0.0, 0.0]), True)
    expect("self: unlisted pair is ignored", make_checker(dict(gs, self_pairs=[]), {"table_z": -100.0})([2.0, 0.0, 0.0]), True)

    # Order: a configuration in the table, a box and the cloud reports the table first.
    box_low = dict(box, center=[0.0, 0.0, 0.0])
    ck = make_checker(_gantry(), {"table_z": 0.0, "boxes": [box_low], "grid": grid})
    expect("order: table before box and cloud", ck.first_contact([0.0, 0.0, 0.0])[0], "table")
    ck = make_checker(_gantry(), {"table_z": -100.0, "boxes": [box_low], "grid": grid})
    expect("order: cloud alone", ck.first_contact(occ_c)[0], "cloud")
    # (-0.375)^3 is 0.2165 from the box and centred in cell (2, 2, 2), D = 0.354: both rules fire.
    expect("order: box before cloud", ck.first_contact([-0.375, -0.375, -0.375])[0], "box")

    print(f"{'selftest passed' if not failures else 'selftest FAILED: ' + ', '.join(failures)}")
    return 0 if not failures else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--selftest"]:
        sys.exit(_selftest())
    print(__doc__)
    sys.exit(2)
