#!/usr/bin/env python3
"""Write a REQUEST.json for benches/ik_peer.py: targets = Pinocchio FK of random joint vectors.

    pip install pin==4.1.0 numpy
    python3 benches/make_ik_request.py robot-configs/xarm6 200 /tmp/ik_req_xarm6.json [SEED]

The targets are poses of robot.toml's tip_link in its base_link, each reached by some q drawn
uniformly within the URDF limits (so every target is reachable); the seed is the mid-range of
the limits. Finger (non-arm) joints are locked at their lower limit.
"""

import json
import os
import sys
import tomllib

import numpy as np
import pinocchio as pin


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    cfg_dir, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    seed = int(sys.argv[4]) if len(sys.argv) == 5 else 7
    with open(os.path.join(cfg_dir, "robot.toml"), "rb") as f:
        cfg = tomllib.load(f)
    urdf = os.path.join(cfg_dir, cfg["urdf"])
    arm = cfg["arm_joints"]
    full = pin.buildModelFromUrdf(urdf)
    q_ref = pin.neutral(full)
    lock = []
    for jid in range(1, full.njoints):
        if full.names[jid] not in arm:
            q_ref[full.joints[jid].idx_q] = full.lowerPositionLimit[full.joints[jid].idx_q]
            lock.append(jid)
    model = pin.buildReducedModel(full, lock, q_ref)
    data = model.createData()
    iq = [model.joints[model.getJointId(j)].idx_q for j in arm]
    lo, hi = model.lowerPositionLimit[iq], model.upperPositionLimit[iq]
    fid = model.getFrameId(cfg["tip_link"])
    rng = np.random.default_rng(seed)
    targets = []
    for _ in range(n):
        q = pin.neutral(model)
        q[iq] = rng.uniform(lo, hi)
        pin.framesForwardKinematics(model, data, q)
        targets.append([float(v) for v in data.oMf[fid].homogeneous.reshape(-1)])
    req = {
        "urdf": urdf,
        "base_link": cfg["base_link"],
        "tip_link": cfg["tip_link"],
        "arm_joints": arm,
        "seed": [float(v) for v in (lo + hi) / 2],
        "targets": targets,
        "timeout_s": 0.005,
        "eps": 1e-5,
    }
    with open(out, "w") as f:
        json.dump(req, f)


if __name__ == "__main__":
    main()
