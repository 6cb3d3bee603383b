"""Drives `pointact emulate xarm` with the official xArm Python SDK (xarm-python-sdk 1.18.4).

Usage: python xarm_sdk_conformance.py COMMAND_PORT
The emulator must serve its rich report on 30002 (the SDK picks the report layout by that port
number); the command port is patched into the SDK's config before it connects (docs/references.md
section 3).
Every step asserts; the first failure prints `FAIL: ...` and exits 1.
"""

import math
import sys
import time

from xarm.core.config.x_config import XCONF

XCONF.SocketConf.TCP_CONTROL_PORT = int(sys.argv[1])

from xarm.wrapper import XArmAPI  # noqa: E402  (after the port patch)

READY = [0.0, -0.6, -0.9, 0.0, 1.5, 0.0]


def check(ok, what):
    if not ok:
        print("FAIL: " + what, flush=True)
        sys.exit(1)
    print("ok    " + what, flush=True)


def close(a, b, tol):
    return all(abs(x - y) <= tol for x, y in zip(a, b))


def wait_for(pred, timeout=3.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


arm = XArmAPI("127.0.0.1", is_radian=True)
check(arm.connected, "connected to the emulator")
check(arm.version_number[:3] == (2, 3, 0) or list(arm.version_number[:3]) == [2, 3, 0],
      "firmware version parsed: %s" % (arm.version_number,))

check(arm.motion_enable(enable=True) == 0, "motion_enable")
check(arm.set_mode(0) == 0, "set_mode(0)")
check(arm.set_state(0) == 0, "set_state(0)")
code, state = arm.get_state()
check(code == 0 and state == 2, "state is ready (2), got %s" % state)

# Joint move with wait, read back.
code = arm.set_servo_angle(angle=READY, speed=1.0, mvacc=10.0, wait=True)
check(code == 0, "set_servo_angle(wait) code %s" % code)
code, angles = arm.get_servo_angle()
check(code == 0 and close(angles[:6], READY, 1e-3), "joints at the target: %s" % angles[:6])

# Absolute Cartesian move with wait.
code, start = arm.get_position()
check(code == 0, "get_position")
target = list(start)
target[0] += 50.0
target[2] -= 30.0
code = arm.set_position(*target, speed=100, mvacc=2000, wait=True)
check(code == 0, "set_position absolute (wait) code %s" % code)
code, pose = arm.get_position()
check(code == 0 and close(pose[:3], target[:3], 0.1), "TCP at %s, wanted %s" % (pose[:3], target[:3]))
check(close(pose[3:], target[3:], 1e-3) or close([abs(v) for v in pose[3:]], [abs(v) for v in target[3:]], 1e-3),
      "orientation kept: %s" % pose[3:])

# Relative Cartesian move with wait.
code = arm.set_position(x=0, y=30, z=-20, relative=True, speed=100, mvacc=2000, wait=True)
check(code == 0, "set_position relative (wait) code %s" % code)
code, pose2 = arm.get_position()
want = [pose[0], pose[1] + 30, pose[2] - 20]
check(code == 0 and close(pose2[:3], want, 0.1), "TCP at %s after the relative move, wanted %s" % (pose2[:3], want))

# An unreachable target is refused with an error, and nothing moves.
code, before = arm.get_servo_angle()
code = arm.set_position(x=700, y=0, z=900, roll=math.pi, pitch=0, yaw=0, speed=100, mvacc=2000, wait=True)
check(code != 0, "unreachable target refused (code %s)" % code)
check(wait_for(lambda: arm.error_code == 21), "controller error C21 reported, got %s" % arm.error_code)
code, after = arm.get_servo_angle()
check(close(after, before, 1e-6), "the arm did not move")
# ... and recovered.
check(arm.clean_error() == 0, "clean_error")
check(arm.set_state(0) == 0, "set_state(0) after the error")
code, ew = arm.get_err_warn_code()
check(code == 0 and ew == [0, 0], "error cleared: %s" % ew)
code = arm.set_servo_angle(angle=READY, speed=1.0, mvacc=10.0, wait=True)
check(code == 0, "moves again after recovery (code %s)" % code)

# The recovery flow scripts written for the real arm use, with no pause between the calls and in
# degrees: the SDK checks the error of the last report before it waits for a motion, so the
# cleared error must be reported before the move is issued.
code = arm.set_position(x=700, y=0, z=900, roll=math.pi, pitch=0, yaw=0, speed=100, mvacc=2000, wait=True)
check(code != 0 and wait_for(lambda: arm.error_code == 21), "C21 again (code %s)" % code)
check(arm.clean_error() == 0, "clean_error")
check(arm.motion_enable(True) == 0, "motion_enable(True)")
check(arm.set_mode(0) == 0, "set_mode(0)")
check(arm.set_state(0) == 0, "set_state(0)")
code = arm.set_servo_angle(angle=[0, -30, -50, 0, 80, 0], speed=60, is_radian=False, wait=True)
check(code == 0, "set_servo_angle(speed=60 deg/s, wait) right after the recovery (code %s)" % code)

# A warning (a mode that does not exist: bad parameter, warning 12) is cleared by clean_warn.
arm.set_mode(99)
check(wait_for(lambda: arm.warn_code != 0), "warning reported after set_mode(99): %s" % arm.warn_code)
check(arm.clean_warn() == 0, "clean_warn")
code, ew = arm.get_err_warn_code()
check(code == 0 and ew == [0, 0], "warning cleared: %s" % ew)
check(wait_for(lambda: arm.warn_code == 0), "the report shows no warning: %s" % arm.warn_code)
check(arm.set_mode(0) == 0 and arm.set_state(0) == 0, "position mode again")

# Stop (state 4), then resume with set_state(0) and move.
check(arm.set_state(4) == 0 and arm.get_state() == (0, 4), "set_state(4) stops: %s" % (arm.get_state(),))
check(arm.set_state(0) == 0 and arm.get_state() == (0, 2), "set_state(0) resumes: %s" % (arm.get_state(),))
code = arm.set_servo_angle(angle=READY, speed=1.0, mvacc=10.0, wait=True)
check(code == 0, "moves after a stop and resume (code %s)" % code)

# reset(wait=True): to the zero joints, ready.
arm.reset(wait=True)
code, angles = arm.get_servo_angle()
check(code == 0 and close(angles[:6], [0.0] * 6, 1e-3), "reset to zero joints: %s" % angles[:6])
check(arm.get_state() == (0, 2) and arm.error_code == 0, "ready after reset: %s" % (arm.get_state(),))

# An emergency stop: a motion is refused (not ready, code 9) and nothing moves until the arm is
# enabled and started again.
arm.emergency_stop()
check(arm.get_state()[1] == 4, "emergency_stop: state 4")
code = arm.set_servo_angle(angle=READY, speed=1.0, mvacc=10.0, wait=True)
check(code == 9, "set_servo_angle after the emergency stop is refused as not ready (code %s)" % code)
code, angles = arm.get_servo_angle()
check(close(angles[:6], [0.0] * 6, 1e-6), "nothing moved: %s" % angles[:6])
check(arm.motion_enable(True) == 0 and arm.set_mode(0) == 0 and arm.set_state(0) == 0, "enabled and started again")
code = arm.set_servo_angle(angle=READY, speed=1.0, mvacc=10.0, wait=True)
check(code == 0, "moves after the emergency stop is cleared (code %s)" % code)

# A relative move queued behind an absolute one is relative to the queued target.
code, p0 = arm.get_position()
a = [p0[0] - 40, p0[1], p0[2] - 40] + list(p0[3:])
check(arm.set_position(*a, speed=100, mvacc=2000, wait=False) == 0, "absolute move queued")
check(arm.set_position(x=0, y=30, z=0, relative=True, speed=100, mvacc=2000, wait=False) == 0,
      "relative move queued behind it")
time.sleep(0.2)
check(wait_for(lambda: not arm.get_is_moving(), timeout=20), "both moves done")
code, p1 = arm.get_position()
want = [a[0], a[1] + 30, a[2]]
check(code == 0 and close(p1[:3], want, 0.1), "TCP at %s, wanted %s" % (p1[:3], want))

# xArm Gripper through the RS-485 tunnel.
check(arm.set_gripper_enable(True) == 0, "set_gripper_enable")
code = arm.set_gripper_position(400, wait=True)
check(code == 0, "set_gripper_position(400, wait) code %s" % code)
code, gpos = arm.get_gripper_position()
check(code == 0 and gpos is not None and abs(gpos - 400) <= 1, "gripper at %s" % gpos)

# Servo mode: stream joint targets, then Cartesian targets.
check(arm.set_mode(1) == 0, "set_mode(1)")
check(arm.set_state(0) == 0, "set_state(0) in servo mode")
check(wait_for(lambda: arm.mode == 1), "report shows mode 1")
code, q = arm.get_servo_angle()
q = list(q)
for _ in range(50):
    q[0] += 0.002
    code = arm.set_servo_angle_j(q)
    check(code == 0, "set_servo_angle_j") if code != 0 else None
    time.sleep(0.01)
check(wait_for(lambda: close(arm.get_servo_angle()[1][:6], q[:6], 1e-3)),
      "servo joint target reached: %s vs %s" % (arm.get_servo_angle()[1][:6], q[:6]))
code, p = arm.get_position()
p = list(p)
for _ in range(40):
    p[1] += 0.5
    code = arm.set_servo_cartesian(p)
    check(code == 0, "set_servo_cartesian") if code != 0 else None
    time.sleep(0.01)
check(wait_for(lambda: close(arm.get_position()[1][:3], p[:3], 0.1)),
      "servo Cartesian target reached: %s vs %s" % (arm.get_position()[1][:3], p[:3]))
check(arm.error_code == 0 and arm.warn_code == 0, "no error or warning at the end")

arm.disconnect()
print("PASS: official SDK against the emulator", flush=True)
