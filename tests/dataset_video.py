"""Decodes an MP4 with PyAV (FFmpeg), as LeRobot's PyAV backend does, and compares it with the
raw RGB frames it was made from.

Usage: python dataset_video.py VIDEO.mp4 FRAMES.rgb WIDTH HEIGHT
Prints one JSON object: codec, frames, pts_seconds (pts · time_base per frame), keyframes (indices),
psnr_db (per frame, RGB, peak 255), seek_ok (a seek to the middle frame decodes that frame),
unchanged_mbs (16x16 blocks of a frame after the first whose source pixels equal the frame
before's) and unchanged_mbs_altered (how many of those decode to other Y/Cb/Cr samples than the
frame before: a skipped macroblock is copied exactly).
"""
import json
import sys

import av
import numpy as np


def yuv_block(planes, x, y, width, height):
    """The Y, Cb and Cr samples of the 16x16 block at (x, y) of a yuv420p array."""
    luma = planes[:height]
    chroma = planes[height:].reshape(2, height // 2, width // 2)
    cx, cy = x // 2, y // 2
    return luma[y:y + 16, x:x + 16], chroma[0, cy:cy + 8, cx:cx + 8], chroma[1, cy:cy + 8, cx:cx + 8]


def main():
    video, raw, width, height = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    source = np.fromfile(raw, dtype=np.uint8).reshape(-1, height, width, 3)
    out = {"pts_seconds": [], "keyframes": [], "psnr_db": []}
    out["unchanged_mbs"], out["unchanged_mbs_altered"] = 0, 0
    previous = None
    with av.open(video) as container:
        stream = container.streams.video[0]
        out["codec"] = stream.codec_context.name
        for i, frame in enumerate(container.decode(stream)):
            planes = frame.to_ndarray(format="yuv420p")  # Y rows, then Cb and Cr rows
            if previous is not None and not frame.key_frame:
                for y in range(0, height, 16):
                    for x in range(0, width, 16):
                        if np.array_equal(source[i, y:y + 16, x:x + 16], source[i - 1, y:y + 16, x:x + 16]):
                            out["unchanged_mbs"] += 1
                            now, before = yuv_block(planes, x, y, width, height), yuv_block(previous, x, y, width, height)
                            out["unchanged_mbs_altered"] += int(any(not np.array_equal(a, b) for a, b in zip(now, before)))
            previous = planes
            out["pts_seconds"].append(float(frame.pts * stream.time_base))
            if frame.key_frame:
                out["keyframes"].append(i)
            rgb = frame.to_ndarray(format="rgb24").astype(np.float64)
            mse = np.mean((rgb - source[i].astype(np.float64)) ** 2)
            out["psnr_db"].append(float("inf") if mse == 0 else float(10 * np.log10(255**2 / mse)))
        out["frames"] = len(out["pts_seconds"])
        middle = out["frames"] // 2
        target = int(round(out["pts_seconds"][middle] / stream.time_base))
        container.seek(target, stream=stream, backward=True)
        seek_ok = False
        for frame in container.decode(stream):
            if frame.pts == target:
                rgb = frame.to_ndarray(format="rgb24").astype(np.float64)
                mse = np.mean((rgb - source[middle].astype(np.float64)) ** 2)
                seek_ok = bool(10 * np.log10(255**2 / max(mse, 1e-12)) > 30)
                break
        out["seek_ok"] = seek_ok
    print(json.dumps(out))


if __name__ == "__main__":
    main()
