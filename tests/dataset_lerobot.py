"""Reads a LeRobotDataset v3.0 folder written by pointact the way lerobot does, and checks it
against what was written.

Usage: python dataset_lerobot.py DIR EXPECT.json [--lerobot]

EXPECT.json (written by the Rust test): {"fps", "episodes": [{"task", "length", "state": [[..]],
"action": [[..]]}], "video": {"key", "width", "height", "raw": FILE} | null, "depth": {"key",
"width", "height", "raw": FILE | null} | absent}. The video's FILE holds every episode's frames, in
order, as packed RGB8; the depth's, as little-endian float32 metres (null: the codes are not
compared, only decoded).

Without --lerobot: pyarrow, pandas and PyAV (FFmpeg) only, as lerobot's loader uses them
(`datasets` casts the Parquet tables to the features, pandas reads the tasks, PyAV decodes):
the tables' exact arrow types, the row invariants the loader indexes by, states and actions bit
for bit, every frame decoded at its timestamp within the codec's error, stats.json's shape.
With --lerobot: the `lerobot` package itself loads the folder (`LeRobotDataset(repo_id,
root=DIR)`, offline, PyAV backend) and every item is compared; the statistics are recomputed with
lerobot's own `compute_episode_stats` / `aggregate_stats` and compared with stats.json (images
left out: lerobot 0.4.4 squares uint8 pixels in uint8 and reports std 0; the Rust golden test
checks images against lerobot 0.6.1).

Prints one JSON object with what was checked; exits 1 with the reason on the first mismatch.
"""
import glob
import json
import math
import os
import sys

import av
import numpy as np
import pandas as pd
import pyarrow.parquet as pq


def leave(code):
    """Exits without the interpreter's teardown: pyarrow's and FFmpeg's native threads have been
    seen to abort it ("terminate called without an active exception") after every check passed,
    turning a verdict already printed into a crash."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def fail(msg):
    print(json.dumps({"ok": False, "error": msg}))
    leave(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * math.log10(255**2 / mse))


def main():
    root, expect_path = sys.argv[1], sys.argv[2]
    use_lerobot = "--lerobot" in sys.argv[3:]
    expect = json.load(open(expect_path))
    info = json.load(open(os.path.join(root, "meta/info.json")))
    fps = expect["fps"]
    eps = expect["episodes"]
    if eps is None:
        # Only the folder's own consistency: lengths and tasks from its episodes table.
        ep_table = pd.concat([pd.read_parquet(f) for f in sorted(glob.glob(os.path.join(root, "meta/episodes/*/*.parquet")))])
        eps = [{"length": int(r["length"]), "task": r["tasks"][0]} for _, r in ep_table.iterrows()]
    total = sum(e["length"] for e in eps)
    check(info["codebase_version"] == "v3.0", f"codebase_version {info['codebase_version']}")
    check(info["fps"] == fps, f"fps {info['fps']}")
    check(info["total_episodes"] == len(eps), f"total_episodes {info['total_episodes']}")
    check(info["total_frames"] == total, f"total_frames {info['total_frames']} != {total}")
    features = info["features"]
    check(list(features)[-5:] == ["timestamp", "frame_index", "episode_index", "index", "task_index"],
          f"default features {list(features)[-5:]}")

    # Tasks: the strings are pandas' index, as lerobot reads them.
    tasks = pd.read_parquet(os.path.join(root, "meta/tasks.parquet"))
    tasks.index.name = "task"
    check(list(tasks["task_index"]) == list(range(len(tasks))), f"task_index {list(tasks['task_index'])}")
    check(info["total_tasks"] == len(tasks), "total_tasks")
    task_strings = list(tasks.index)

    # Frames: sorted files, exact arrow types, contiguous rows.
    files = sorted(glob.glob(os.path.join(root, "data/*/*.parquet")))
    tables = [pq.read_table(f) for f in files]
    columns = [n for n, f in features.items() if f["dtype"] != "video"]
    for t in tables:
        check(t.column_names == columns, f"data columns {t.column_names} != {columns}")
        for n in columns:
            f = features[n]
            typ = str(t.schema.field(n).type)
            want = {"float32": "float", "float64": "double", "int64": "int64", "bool": "bool"}[f["dtype"]]
            if f["shape"] != [1]:
                want = f"fixed_size_list<element: {want}>[{f['shape'][0]}]"
            check(typ == want, f"column {n} is {typ}, lerobot writes {want}")
    rows = {n: np.concatenate([np.array(t.column(n).to_pylist()) for t in tables]) for n in columns}
    check(len(rows["index"]) == total, f"{len(rows['index'])} rows")
    check((rows["index"] == np.arange(total)).all(), "index is not 0..N-1 in file order")
    start = 0
    for e_i, e in enumerate(eps):
        n = e["length"]
        sl = slice(start, start + n)
        check((rows["episode_index"][sl] == e_i).all(), f"episode_index of episode {e_i}")
        check((rows["frame_index"][sl] == np.arange(n)).all(), f"frame_index of episode {e_i}")
        ts = (np.arange(n) / fps).astype(np.float32)
        check((rows["timestamp"][sl].astype(np.float32) == ts).all(), f"timestamp of episode {e_i}")
        check(all(task_strings[i] == e["task"] for i in rows["task_index"][sl]), f"task of episode {e_i}")
        for key, col in (("state", "observation.state"), ("action", "action")):
            if key not in e:
                continue
            got = np.stack(rows[col][sl]).astype(np.float32)
            want = np.array(e[key], dtype=np.float32)
            check(got.shape == want.shape and (got == want).all(), f"{col} of episode {e_i} differs")
        start += n

    # Episodes: one row per episode, in order, pointing at the frames and the video.
    ep_rows = pd.concat([pd.read_parquet(f) for f in sorted(glob.glob(os.path.join(root, "meta/episodes/*/*.parquet")))])
    check(list(ep_rows["episode_index"]) == list(range(len(eps))), "episodes rows out of order")
    starts = np.cumsum([0] + [e["length"] for e in eps])
    check(list(ep_rows["dataset_from_index"]) == list(starts[:-1]), "dataset_from_index")
    check(list(ep_rows["dataset_to_index"]) == list(starts[1:]), "dataset_to_index")

    video = expect.get("video")
    worst_psnr = None
    if video:
        key, w, h = video["key"], video["width"], video["height"]
        raw = np.fromfile(video["raw"], dtype=np.uint8).reshape(-1, h, w, 3)
        check(len(raw) == total, f"{len(raw)} raw frames for {total}")
        worst_psnr = float("inf")
        for e_i, e in enumerate(eps):
            r = ep_rows.iloc[e_i]
            path, t0 = video_file(root, info, r, key)
            with av.open(path) as c:
                s = c.streams.video[0]
                check(s.codec_context.name == "h264", f"codec {s.codec_context.name}")
                frames = [(float(f.pts * s.time_base), f.to_ndarray(format="rgb24")) for f in c.decode(s)]
            own = [fr for fr in frames if t0 - 1e-4 <= fr[0] < t0 + e["length"] / fps - 1e-4]
            check(len(own) == e["length"], f"episode {e_i}: {len(own)} frames decoded for {e['length']}")
            for i, (pts, img) in enumerate(own):
                check(abs(pts - (t0 + i / fps)) < 1e-4, f"episode {e_i} frame {i} at {pts}s")
                worst_psnr = min(worst_psnr, psnr(img, raw[starts[e_i] + i]))
        check(worst_psnr > 30, f"decoded frames differ: worst PSNR {worst_psnr:.1f} dB")

    depth = expect.get("depth")
    depth_report = None
    if depth:
        depth_report = check_depth(root, info, depth, eps, ep_rows, starts, fps, total)

    stats = json.load(open(os.path.join(root, "meta/stats.json")))
    for n, f in features.items():
        check(n in stats, f"stats.json lacks {n}")
        check(stats[n]["count"] == [total] or f["dtype"] == "video", f"count of {n}: {stats[n]['count']}")
        shape = np.array(stats[n]["mean"]).shape
        want = (f["shape"][2], 1, 1) if f["dtype"] == "video" else (f["shape"][0],)
        check(shape == want, f"stats of {n} have shape {shape}")

    out = {"ok": True, "frames": total, "episodes": len(eps), "tasks": task_strings,
           "worst_psnr_db": worst_psnr, "depth": depth_report, "lerobot": None}
    if use_lerobot:
        out["lerobot"] = with_lerobot(root, expect, eps, rows, features, stats, starts, raw if video else None)
    print(json.dumps(out))


def video_file(root, info, row, key):
    """The MP4 holding episode `row`'s video `key`, and where the episode starts in it (s)."""
    path = os.path.join(root, info["video_path"].format(
        video_key=key, chunk_index=int(row[f"videos/{key}/chunk_index"]),
        file_index=int(row[f"videos/{key}/file_index"])))
    return path, float(row[f"videos/{key}/from_timestamp"])


def quantize_depth(metres, q):
    """lerobot 0.6.1 `depth_utils.quantize_depth(depth, input_unit="m")` with the feature's
    parameters, its numpy float32 operations in its order."""
    depth_f = metres.astype(np.float32)
    depth_min_u, depth_max_u, shift_u = np.float32(q["depth_min"]), np.float32(q["depth_max"]), np.float32(q["shift"])
    if q["use_log"]:
        log_min = math.log(float(depth_min_u + shift_u))
        log_max = math.log(float(depth_max_u + shift_u))
        with np.errstate(invalid="ignore", divide="ignore"):
            norm = (np.log(depth_f + shift_u) - log_min) / (log_max - log_min)
    else:
        norm = (depth_f - depth_min_u) / (depth_max_u - depth_min_u)
    return np.rint(norm * 4095).clip(0, 4095).astype(np.uint16, copy=False)


def dequantize_depth(codes, q):
    """lerobot 0.6.1 `depth_utils.dequantize_depth(codes, output_unit="m")`, numpy path."""
    if q["use_log"]:
        log_min = math.log(q["depth_min"] + q["shift"])
        log_max = math.log(q["depth_max"] + q["shift"])
        scale, offset = (log_max - log_min) / 4095, log_min
    else:
        scale, offset = (q["depth_max"] - q["depth_min"]) / 4095, q["depth_min"]
    buf = np.empty(codes.shape, dtype=np.float32)
    np.multiply(codes, scale, out=buf)
    np.add(buf, offset, out=buf)
    if q["use_log"]:
        np.exp(buf, out=buf)
        np.subtract(buf, q["shift"], out=buf)
    np.clip(buf, q["depth_min"], q["depth_max"], out=buf)
    return buf


def check_depth(root, info, depth, eps, ep_rows, starts, fps, total):
    """The depth video as lerobot reads a depth feature: its `info` (is_depth_map, the quantiser,
    depth_unit), HEVC `gray12le` decoded frame by frame at its timestamps, every code equal to
    lerobot's quantisation of the depth written, and back in metres within half a quantum."""
    key, w, h = depth["key"], depth["width"], depth["height"]
    f = info["features"][key]
    i = f["info"]
    check(f["shape"] == [h, w, 1], f"depth shape {f['shape']}")
    check(i.get("is_depth_map") is True and i.get("depth_unit") == "m", f"depth info {i}")
    q = {k: i[f"video.{k}"] for k in ("depth_min", "depth_max", "shift", "use_log")}
    raw = np.fromfile(depth["raw"], dtype="<f4").reshape(-1, h, w) if depth.get("raw") else None
    check(raw is None or len(raw) == total, "depth raw frames")
    mismatched, decoded, worst_rel = 0, 0, 0.0
    for e_i, e in enumerate(eps):
        r = ep_rows.iloc[e_i]
        path, t0 = video_file(root, info, r, key)
        with av.open(path) as c:
            s = c.streams.video[0]
            check(s.codec.canonical_name == i["video.codec"] == "hevc", f"depth codec {s.codec.canonical_name}")
            check(s.pix_fmt == i["video.pix_fmt"] == "gray12le", f"depth pix_fmt {s.pix_fmt}")
            frames = [(float(fr.pts * s.time_base), fr.to_ndarray(format="gray12le")) for fr in c.decode(s)]
        own = [fr for fr in frames if t0 - 1e-4 <= fr[0] < t0 + e["length"] / fps - 1e-4]
        check(len(own) == e["length"], f"depth of episode {e_i}: {len(own)} frames for {e['length']}")
        for k, (pts, codes) in enumerate(own):
            check(abs(pts - (t0 + k / fps)) < 1e-4, f"depth of episode {e_i} frame {k} at {pts}s")
            decoded += 1
            if raw is None:
                continue
            src = raw[starts[e_i] + k]
            mismatched += int(np.count_nonzero(codes != quantize_depth(src, q)))
            inside = (src >= q["depth_min"]) & (src <= q["depth_max"])
            metres = dequantize_depth(codes, q)
            rel = np.abs(metres[inside] - src[inside]) / (src[inside] + q["shift"])
            worst_rel = max(worst_rel, float(rel.max()) if rel.size else 0.0)
    # Half a quantum in log space: |log(d+shift) error| <= step/2, so |error| / (d+shift) <=
    # exp(step/2) - 1, plus float32 rounding.
    step = math.log((q["depth_max"] + q["shift"]) / (q["depth_min"] + q["shift"])) / 4095
    bound = math.expm1(step / 2) + 1e-6
    check(raw is None or mismatched == 0, f"{mismatched} depth codes differ from lerobot's quantisation")
    check(worst_rel <= bound, f"depth back in metres off by {worst_rel:.2e} of (d + shift) > {bound:.2e}")
    return {"frames": decoded, "mismatched_codes": mismatched, "worst_relative_error": worst_rel, "bound": bound}


def with_lerobot(root, expect, eps, rows, features, stats, starts, raw):
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    import lerobot
    from lerobot.datasets.compute_stats import aggregate_stats, compute_episode_stats
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/pointact-check", root=root, video_backend="pyav")
    check(ds.num_episodes == len(eps), f"lerobot sees {ds.num_episodes} episodes")
    check(len(ds) == int(starts[-1]), f"lerobot sees {len(ds)} frames")
    # A depth feature comes back dequantised (lerobot's torch path) in the dataset's output unit
    # (lerobot 0.6.1's default: millimetres, rounded to whole ones): compared with the numpy
    # path's metres from lerobot's own codes of the depth written.
    depth = expect.get("depth")
    draw, dq, worst_depth = None, None, None
    if depth and depth.get("raw"):
        dh, dw = depth["height"], depth["width"]
        draw = np.fromfile(depth["raw"], dtype="<f4").reshape(-1, dh, dw)
        fi = features[depth["key"]]["info"]
        dq = {k: fi[f"video.{k}"] for k in ("depth_min", "depth_max", "shift", "use_log")}
        unit = getattr(ds, "depth_output_unit", "m")
        scale = {"m": 1.0, "mm": 1000.0}[unit]
        check(depth["key"] in ds.meta.depth_keys, f"lerobot does not see {depth['key']} as depth")
        worst_depth = 0.0
    worst = float("inf")
    for e_i, e in enumerate(eps):
        for i in range(e["length"]):
            item = ds[int(starts[e_i]) + i]
            check(item["task"] == e["task"], f"lerobot item task {item['task']!r}")
            if draw is not None:
                got = item[depth["key"]].numpy()
                check(got.shape == (1, dh, dw), f"lerobot depth item of shape {got.shape}")
                want = dequantize_depth(quantize_depth(draw[starts[e_i] + i], dq), dq) * scale
                if unit == "mm":
                    off = np.abs(got[0].astype(np.float64) - want)  # whole millimetres: <= 0.5
                else:
                    off = np.abs(got[0].astype(np.float64) - want) / np.abs(want)
                worst_depth = max(worst_depth, float(off.max()))
            if "state" not in e:
                continue
            check((item["observation.state"].numpy() == np.array(e["state"][i], dtype=np.float32)).all(),
                  f"lerobot: state of episode {e_i} frame {i}")
            check((item["action"].numpy() == np.array(e["action"][i], dtype=np.float32)).all(),
                  f"lerobot: action of episode {e_i} frame {i}")
            if raw is not None:
                key = expect["video"]["key"]
                img = (item[key].numpy().transpose(1, 2, 0) * 255).round().astype(np.uint8)
                worst = min(worst, psnr(img, raw[starts[e_i] + i]))
    if raw is not None:
        check(worst > 30, f"lerobot-decoded frames: worst PSNR {worst:.1f} dB")
    if worst_depth is not None:
        # Millimetres are rounded to whole ones; metres are float32 exp in torch and in numpy, an
        # ulp or two apart at most.
        limit = 0.5 + 1e-3 if unit == "mm" else 1e-6
        check(worst_depth <= limit, f"lerobot's depth differs from its numpy dequantisation by {worst_depth:.2e} ({unit})")
    # The statistics, recomputed by lerobot from the same frames (non-image features).
    plain = {n: f for n, f in features.items() if f["dtype"] not in ("video", "image", "string")}
    agg = None
    for e_i, e in enumerate(eps):
        sl = slice(int(starts[e_i]), int(starts[e_i + 1]))
        data = {}
        for n, f in plain.items():
            v = rows[n][sl]
            v = np.stack(v) if f["shape"] != [1] else np.asarray(v)
            data[n] = v.astype(np.dtype(f["dtype"]))
        data["timestamp"] = np.arange(e["length"]) / expect["fps"]
        ep = compute_episode_stats(data, plain)
        agg = ep if agg is None else aggregate_stats([agg, ep])
    worst_rel = 0.0
    for n in plain:
        for k, v in agg[n].items():
            ours = np.array(stats[n][k], dtype=np.float64).ravel()
            theirs = np.asarray(v, dtype=np.float64).ravel()
            check(ours.shape == theirs.shape, f"stats {n}/{k} shape")
            rel = np.max(np.abs(ours - theirs) / np.maximum(np.abs(theirs), 1e-300)) if ours.size else 0.0
            worst_rel = max(worst_rel, float(rel))
    check(worst_rel <= 1e-12, f"stats.json differs from lerobot's by {worst_rel:.3g} (relative)")
    return {"version": lerobot.__version__ if hasattr(lerobot, "__version__") else "?",
            "worst_psnr_db": worst if raw is not None else None, "stats_worst_relative": worst_rel,
            "depth_worst": worst_depth}


if __name__ == "__main__":
    main()
    leave(0)
