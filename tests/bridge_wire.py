"""The other side of crates/apps/src/tests/bridge_wire.rs: openpi-client 0.1.2's own msgpack_numpy, run by the
Python named in POINTACT_PYTHON.

    bridge_wire.py observation DIR   writes DIR/obs.msgpack (openpi's packb of a SimplerEnv-like
                                     observation) and DIR/obs_strkeys.msgpack (the same content
                                     with str-keyed array tags, as the vla-evaluation-harness
                                     sends them), and prints the content described as JSON
    bridge_wire.py action FILE       unpacks FILE (the Rust encoding of the action below) with
                                     openpi's unpackb, checks it equals the action, and checks the
                                     bytes equal openpi's packb of the action

The JSON description is tagged so that nothing is lost between the two languages: arrays by
dtype, shape, CRC-32 of their bytes and their first and last elements; numpy scalars by dtype and
value; maps as ordered [key, value] pairs; floats by the hex of their float64 bits (a JSON reader
need not round decimal floats correctly).
"""

import json
import struct
import sys
import zlib

import msgpack
import numpy as np
from openpi_client import msgpack_numpy


def observation():
    """What a SimplerEnv runner would send for one step of widowx_carrot_on_plate (the rgbd observation
    of ManiSkill2_real2sim, in the protocol of sim/simplerenv/README.md), plus one value of each kind
    the wire format has."""
    rng = np.random.default_rng(7)
    rgb = rng.integers(0, 256, size=(480, 640, 3), dtype=np.uint8)
    depth = rng.uniform(0.2, 3.0, size=(480, 640, 1)).astype(np.float32)
    intrinsic = np.array([[623.5, 0.0, 319.5], [0.0, 623.5, 239.5], [0.0, 0.0, 1.0]])
    extrinsic = np.eye(4)
    extrinsic[:3, :3] = [[0.0, -1.0, 0.0], [-0.8, 0.0, -0.6], [0.6, 0.0, -0.8]]
    extrinsic[:3, 3] = [0.1, -0.2, 0.75]
    return {
        "image": {
            "3rd_view_camera": {
                "rgb": rgb,
                "depth": depth,
                "segmentation": rng.integers(0, 30, size=(60, 80, 1), dtype=np.int32),
                "intrinsic_cv": intrinsic,
                "extrinsic_cv": extrinsic,
            }
        },
        "agent": {
            "qpos": np.array([0.0, 0.1, -0.2, 0.3, 1.2, 0.0, 0.037, 0.037], np.float32),
            "base_pose": np.array([0.147, 0.028, 0.87, 1.0, 0.0, 0.0, 0.0]),
        },
        "extra": {
            "tcp_pose": np.array([0.3, 0.0, 1.05, 0.0, 0.707, 0.0, 0.707]),
            "controller_target_pose": (0.3, 0.0, 0.18, 0.0, 0.0, 0.0, 1.0),
        },
        "instruction": "put carrot on plate",
        "task_name": "widowx_carrot_on_plate",
        "episode_id": 7,
        "step": 0,
        "max_steps": 60,
        "control_freq": 5,
        "reward": 0.0,
        "offset": -3,
        "tiny": -200,
        "far": -(2**40),
        "beyond_i64": 2**63 + 5,
        "done": False,
        "truncated": True,
        "prev_action": None,
        "mixed": [1, 2.5, "x", None, True, [], {}],
        "raw": b"\x00\x01raw",
        "long_text": "é" * 40,
        "scalars": {
            "f32": np.float32(0.1),
            "i64": np.int64(-7),
            "u8": np.uint8(200),
            "u64": np.uint64(2**64 - 1),
            "bool": np.bool_(True),
            "f64": np.float64(1.5),
        },
        "dtypes": {
            "b1": np.array([[True, False], [False, True]]),
            "u1": np.array([0, 255], np.uint8),
            "i1": np.array([-128, 127], np.int8),
            "u2": np.array([0, 65535], np.uint16),
            "i2": np.array([-32768, 32767], np.int16),
            "u4": np.array([0, 2**32 - 1], np.uint32),
            "i4": np.array([-(2**31), 2**31 - 1], np.int32),
            "u8": np.array([0, 2**64 - 1], np.uint64),
            "i8": np.array([-(2**63), 2**63 - 1], np.int64),
            "f4": np.array([-1.5, 3.25e38], np.float32),
            "f8": np.array([-2.5e-300, 1e300]),
        },
        "zero_d": np.array(3.5, np.float32),
        "empty": np.zeros((0, 3)),
        # tobytes() writes C order whatever the memory layout.
        "fortran": np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)),
    }


def action():
    """The action the Rust test encodes (crates/apps/src/tests/bridge_wire.rs `action`): dyadic values, so that
    both languages hold exactly the same numbers."""
    return {
        "actions": np.array([0.125, -0.25, 0.0625, 0.0, 0.5, -0.75, 1.0], np.float32),
        "joint_targets": np.array([0.0, -0.5, 0.25, 1.5, -1.25, 0.75, 0.037109375, -3.0]),
        "server_timing": {"infer_ms": 12.5, "prev_total_ms": 30.25},
        "control_mode": "arm_pd_ee_target_delta_pose_align2_gripper_pd_joint_pos",
        "terminate": False,
        "step": 3,
        "note": None,
        "gripper": np.float32(1.0),
        "episode": np.int64(7),
        "frame": np.arange(12, dtype=np.uint8).reshape(2, 2, 3),
    }


def bits(x):
    """A float64 as the hex of its bits: exact in any language."""
    return struct.pack(">d", x).hex()


def item(x):
    """A numpy element as Python's .item() gives it, floats as their bits."""
    v = x.item()
    return {"f64": bits(v)} if isinstance(v, float) else v


def describe(x):
    # bool before int (a subclass); float before np.generic (np.float64 is a float and msgpack
    # writes it as one).
    if x is None:
        return {"nil": None}
    if isinstance(x, bool):
        return {"bool": x}
    if isinstance(x, float):
        return {"float": bits(x)}
    if isinstance(x, int):
        return {"int": x}
    if isinstance(x, str):
        return {"str": x}
    if isinstance(x, bytes):
        return {"bin": x.hex()}
    if isinstance(x, np.ndarray):
        flat = x.reshape(-1)
        d = {
            "ndarray": x.dtype.str,
            "shape": list(x.shape),
            "crc32": zlib.crc32(x.tobytes()),
        }
        if flat.size:
            d["first"] = item(flat[0])
            d["last"] = item(flat[-1])
        return d
    if isinstance(x, np.generic):
        return {"npgeneric": x.dtype.str, "value": item(x)}
    if isinstance(x, dict):
        return {"map": [[describe(k), describe(v)] for k, v in x.items()]}
    if isinstance(x, (list, tuple)):
        return {"array": [describe(v) for v in x]}
    raise TypeError(f"cannot describe {type(x)}")


def str_key_tags(obj):
    """openpi's pack_array with str keys (the harness's spelling)."""
    packed = msgpack_numpy.pack_array(obj)
    if isinstance(packed, dict):
        return {k.decode(): v for k, v in packed.items()}
    return packed


def same(a, b, path="action"):
    """Equal values of the same types (np.array_equal alone would let dtypes differ)."""
    if type(a) is not type(b):
        raise AssertionError(f"{path}: {type(a).__name__} != {type(b).__name__}")
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(a, b):
            raise AssertionError(f"{path}: {a!r} != {b!r}")
    elif isinstance(a, dict):
        if list(a) != list(b):
            raise AssertionError(f"{path}: keys {list(a)} != {list(b)}")
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif a != b:
        raise AssertionError(f"{path}: {a!r} != {b!r}")


def main():
    mode, where = sys.argv[1], sys.argv[2]
    if mode == "observation":
        obs = observation()
        packed = msgpack_numpy.packb(obs)
        # openpi reads back what it wrote (a sanity check of the reference itself).
        same(msgpack_numpy.unpackb(packed)["image"], obs["image"], "obs.image")
        with open(f"{where}/obs.msgpack", "wb") as f:
            f.write(packed)
        with open(f"{where}/obs_strkeys.msgpack", "wb") as f:
            f.write(msgpack.packb(obs, default=str_key_tags))
        print(json.dumps(describe(obs)))
    elif mode == "action":
        with open(where, "rb") as f:
            ours = f.read()
        expected = action()
        try:
            same(msgpack_numpy.unpackb(ours), expected)
        except AssertionError as e:
            print(f"FAIL: openpi's unpackb of the Rust encoding: {e}")
            sys.exit(1)
        print("PASS: openpi's unpackb reads the Rust encoding as the action")
        theirs = msgpack_numpy.packb(expected)
        if theirs != ours:
            print(f"FAIL: bytes differ\nopenpi {theirs.hex()}\nrust   {ours.hex()}")
            sys.exit(1)
        print(f"PASS: the Rust encoding is byte-identical to openpi's packb ({len(ours)} bytes)")
    else:
        sys.exit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
