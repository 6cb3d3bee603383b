#!/usr/bin/env python3
"""numpy peer of `pointact bench cloud`: depth image -> base-frame point cloud, vectorised.

Run by the Rust benchmark (which embeds this file and writes it next to its inputs):

    python3 cloud_numpy.py SPEC.json

SPEC.json gives the depth file (raw little-endian float32, row-major, metres), the image size,
the intrinsics (librealsense fields and model), the 4x4 base_from_camera matrix, the crop box,
the depth range and the iteration count. The math is the Rust path's: per-pixel rays computed
once with librealsense's undistortion (10 fixed-point iterations, float32), then per frame:
valid & in-range mask, point = depth * (x, y, 1), p_base = R p + t, crop, (N, 3) output. Everything is float32,
as in Rust. Prints one JSON line: {"mpix_per_s", "points", "checksum", "seconds_per_iter", ...}.
"""

import json
import sys
import time

try:
    import numpy as np
except ImportError:
    print(json.dumps({"error": "numpy is not installed (pip install numpy)"}))
    sys.exit(3)


def rays(spec):
    w, h = spec["width"], spec["height"]
    k = spec["intrinsics"]
    f32 = np.float32
    u, v = np.meshgrid(np.arange(w, dtype=f32), np.arange(h, dtype=f32))
    x = (u - f32(k["cx"])) / f32(k["fx"])
    y = (v - f32(k["cy"])) / f32(k["fy"])
    c = [f32(a) for a in k["coeffs"]]
    model = k["model"]
    x0, y0 = x.copy(), y.copy()
    if model == "brown_conrady":
        for _ in range(10):
            r2 = x * x + y * y
            icdist = f32(1) / (f32(1) + ((c[4] * r2 + c[1]) * r2 + c[0]) * r2)
            dx = f32(2) * c[2] * x * y + c[3] * (r2 + f32(2) * x * x)
            dy = f32(2) * c[3] * x * y + c[2] * (r2 + f32(2) * y * y)
            x = (x0 - dx) * icdist
            y = (y0 - dy) * icdist
    elif model == "inverse_brown_conrady":
        for _ in range(10):
            r2 = x * x + y * y
            icdist = f32(1) / (f32(1) + ((c[4] * r2 + c[1]) * r2 + c[0]) * r2)
            xq, yq = x / icdist, y / icdist
            dx = f32(2) * c[2] * xq * yq + c[3] * (r2 + f32(2) * xq * xq)
            dy = f32(2) * c[3] * xq * yq + c[2] * (r2 + f32(2) * yq * yq)
            x = (x0 - dx) * icdist
            y = (y0 - dy) * icdist
    elif model != "none":
        raise SystemExit(f"unsupported model {model}")
    return x.reshape(-1).astype(f32), y.reshape(-1).astype(f32)


def cloud(depth, rx, ry, rot, t, lo, hi, dmin, dmax):
    # Written per coordinate (structure of arrays): on this numpy, `(N, 3) @ (3, 3)` in float32
    # and `np.all(..., axis=1)` are each several times slower than these element-wise passes,
    # and the peer should be the best plain numpy we can write, not a strawman.
    valid = (depth > 0) & (depth >= dmin) & (depth <= dmax) & np.isfinite(depth)
    idx = np.flatnonzero(valid)
    d = depth[idx]
    x = d * rx[idx]
    y = d * ry[idx]
    b = [rot[i, 0] * x + rot[i, 1] * y + rot[i, 2] * d + t[i] for i in range(3)]
    keep = ((b[0] >= lo[0]) & (b[0] <= hi[0]) & (b[1] >= lo[1]) & (b[1] <= hi[1])
            & (b[2] >= lo[2]) & (b[2] <= hi[2]))
    return np.stack([b[0][keep], b[1][keep], b[2][keep]], axis=1), idx[keep]


def main():
    spec = json.load(open(sys.argv[1]))
    w, h = spec["width"], spec["height"]
    depth = np.fromfile(spec["depth_file"], dtype="<f4")
    assert depth.size == w * h, "depth file size does not match width x height"
    rx, ry = rays(spec)
    m = np.array(spec["base_from_camera"], dtype=np.float32)
    rot, t = m[:3, :3].copy(), m[:3, 3].copy()
    lo = np.array(spec["crop_min"], dtype=np.float32)
    hi = np.array(spec["crop_max"], dtype=np.float32)
    dmin, dmax = np.float32(spec["depth_min_m"]), np.float32(spec["depth_max_m"])
    iters = max(1, int(spec["iters"]))

    pts, pix = cloud(depth, rx, ry, rot, t, lo, hi, dmin, dmax)  # warm-up, and the checked result
    start = time.perf_counter()
    for _ in range(iters):
        cloud(depth, rx, ry, rot, t, lo, hi, dmin, dmax)
    secs = (time.perf_counter() - start) / iters
    print(json.dumps({
        "numpy": np.__version__,
        "seconds_per_iter": secs,
        "mpix_per_s": w * h / secs / 1e6,
        "points": int(pts.shape[0]),
        "checksum": float(pts.astype(np.float64).sum()),
    }))


if __name__ == "__main__":
    main()
