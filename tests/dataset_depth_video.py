"""Decodes a depth MP4 with PyAV (FFmpeg) as lerobot 0.6.1 decodes a depth feature
(`video_utils.decode_video_frames_torchvision`, `is_depth=True`: `frame.to_ndarray(format="gray12le")`)
and compares it with the 12-bit codes it was made from.

Usage: python dataset_depth_video.py VIDEO.mp4 CODES.u16 WIDTH HEIGHT [PYAV_DIR]
PYAV_DIR: a folder holding another PyAV (`pip install --target PYAV_DIR av==...`), imported instead
of the interpreter's own: lerobot 0.6.1 pins av<16, whose FFmpeg decodes some HEVC streams that
newer ones decode differently.
Prints one JSON object: av_version (the PyAV that decoded), codec (`stream.codec.canonical_name`) and pix_fmt (`stream.pix_fmt`), as
lerobot's `get_video_info` probes them; encoder_takes_pix_fmt (PyAV's encoder for that codec accepts
that pixel format, which lerobot checks before it reads a depth video); frames; pts_seconds;
keyframes; mismatched (samples of all frames that differ from the source codes) and
mismatched_per_frame (the same, frame by frame); seek_ok (a seek to
the middle frame decodes that frame's codes).
"""
import json
import sys

import numpy as np


def main():
    video, raw, width, height = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if len(sys.argv) > 5:
        sys.path.insert(0, sys.argv[5])
    import av

    source = np.fromfile(raw, dtype="<u2").reshape(-1, height, width)
    out = {"pts_seconds": [], "keyframes": [], "mismatched": 0, "mismatched_per_frame": []}
    out["av_version"] = av.__version__
    with av.open(video) as container:
        stream = container.streams.video[0]
        out["codec"] = stream.codec.canonical_name
        out["pix_fmt"] = stream.pix_fmt
        encoder = av.codec.Codec(stream.codec.canonical_name, "w")
        out["encoder_takes_pix_fmt"] = stream.pix_fmt in [f.name for f in encoder.video_formats or []]
        n = 0
        for i, frame in enumerate(container.decode(stream)):
            codes = frame.to_ndarray(format="gray12le")
            differ = int(np.count_nonzero(codes != source[i]))
            out["mismatched"] += differ
            out["mismatched_per_frame"].append(differ)
            out["pts_seconds"].append(float(frame.pts * stream.time_base))
            if frame.key_frame:
                out["keyframes"].append(i)
            n += 1
        out["frames"] = n
    middle = n // 2
    with av.open(video) as container:
        stream = container.streams.video[0]
        target = middle / float(stream.average_rate)
        container.seek(int(target / stream.time_base), stream=stream, backward=True, any_frame=False)
        out["seek_ok"] = False
        for frame in container.decode(stream):
            if abs(float(frame.pts * stream.time_base) - target) < 1e-4:
                out["seek_ok"] = bool(np.array_equal(frame.to_ndarray(format="gray12le"), source[middle]))
                break
    print(json.dumps(out))


if __name__ == "__main__":
    main()
