//! Golden frames (docs/references.md §2: recorded from the official SDK 1.18.4 against a v2.3.0
//! emulator, protocol id 3), reproduced byte for byte: each request is built from its typed
//! `Command` and must encode to the SDK's bytes, and each recorded reply must decode to the
//! typed `Reply` (and encode back to the same bytes).

use super::*;

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).expect("test hex"))
        .collect()
}

const PI32: f32 = std::f32::consts::PI;

/// Encodes `cmd` as the request with `tid` (prot 3) and compares with `sent`; decodes `sent`
/// back to the same command.
fn check_request(cmd: Command, tid: u16, sent: &str) {
    let golden = hex(sent);
    let req = cmd.request(tid, prot::PRIVATE_V3);
    assert_eq!(req.encode().unwrap(), golden, "encoding {cmd:?}");
    let back = Request::decode(&golden).unwrap();
    assert_eq!(back, req);
    assert_eq!(back.command().unwrap(), cmd);
}

/// Decodes the recorded reply and checks status and typed payload; re-encodes it exactly.
fn check_reply(recv: &str, tid: u16, funcode: u8, status: u8, reply: Reply) {
    let golden = hex(recv);
    let r = Response::decode(&golden).unwrap();
    assert_eq!(
        (r.tid, r.prot, r.funcode, r.status),
        (tid, 3, funcode, Status(status))
    );
    assert_eq!(r.reply().unwrap(), reply);
    let again = Response {
        tid,
        prot: 3,
        funcode,
        status: Status(status),
        payload: reply.encode_payload(),
    };
    assert_eq!(again.encode().unwrap(), golden);
}

#[test]
fn golden_motion_enable() {
    check_request(
        Command::MotionEnable {
            axis: 8,
            enable: true,
        },
        2,
        "00 02 00 03 00 03 0b 08 01",
    );
    check_reply(
        "00 02 00 03 00 02 0b 10",
        2,
        reg::MOTION_EN,
        0x10,
        Reply::Empty,
    );
    let r = Response::decode(&hex("00 02 00 03 00 02 0b 10")).unwrap();
    assert!(r.status.not_ready() && !r.status.error() && !r.status.warning());
}

#[test]
fn golden_get_state() {
    check_request(Command::GetState, 3, "00 03 00 03 00 01 0d");
    check_reply(
        "00 03 00 03 00 03 0d 10 05",
        3,
        reg::GET_STATE,
        0x10,
        Reply::State(5),
    );
    assert_eq!(RobotState::from_u8(5), Some(RobotState::ConfigChanged));
    check_request(Command::GetState, 6, "00 06 00 03 00 01 0d");
    check_reply(
        "00 06 00 03 00 03 0d 00 02",
        6,
        reg::GET_STATE,
        0,
        Reply::State(2),
    );
}

#[test]
fn golden_set_mode_and_state() {
    check_request(
        Command::SetMode {
            mode: Mode::Position as u8,
            detection: Some(0),
        },
        4,
        "00 04 00 03 00 03 13 00 00",
    );
    check_reply(
        "00 04 00 03 00 02 13 10",
        4,
        reg::SET_MODE,
        0x10,
        Reply::Empty,
    );
    check_request(
        Command::SetState(set_state::START),
        5,
        "00 05 00 03 00 02 0c 00",
    );
    check_reply(
        "00 05 00 03 00 02 0c 00",
        5,
        reg::SET_STATE,
        0,
        Reply::Empty,
    );
    check_request(
        Command::SetMode {
            mode: Mode::Servo as u8,
            detection: Some(0),
        },
        0x15,
        "00 15 00 03 00 03 13 01 00",
    );
}

#[test]
fn golden_move_line() {
    let cmd = Command::MoveLine(MoveLine::to(
        [300.0, 0.0, 200.0, PI32, 0.0, 0.0],
        100.0,
        2000.0,
    ));
    check_request(
        cmd,
        7,
        "00 07 00 03 00 2c 15  00 00 96 43  00 00 00 00  00 00 48 43  db 0f 49 40  00 00 00 00  \
         00 00 00 00  00 00 c8 42  00 00 fa 44  00 00 00 00  00 00 80 bf  00 00 00",
    );
    check_reply(
        "00 07 00 03 00 04 15 00 00 01",
        7,
        reg::MOVE_LINE,
        0,
        Reply::MoveAck {
            task: 1,
            check: None,
        },
    );
}

#[test]
fn golden_get_position() {
    check_request(Command::GetTcpPose, 8, "00 08 00 03 00 01 29");
    check_reply(
        "00 08 00 03 00 1a 29 00  00 00 4f 43  00 00 00 00  00 00 e0 42  db 0f 49 40  \
         00 00 00 00  00 00 00 00",
        8,
        reg::GET_TCP_POSE,
        0,
        Reply::Pose([207.0, 0.0, 112.0, PI32, 0.0, 0.0]),
    );
}

#[test]
fn golden_gripper_baud_probe() {
    check_request(
        Command::TgpioRead16 {
            host: RS485_HOST_TOOL,
            addr: tool_reg::BAUD_INDEX,
        },
        0x12,
        "00 12 00 03 00 04 80 09 0a 0b",
    );
    check_reply(
        "00 12 00 03 00 06 80 00 00 00 00 0b",
        0x12,
        reg::TGPIO_R16B,
        0,
        Reply::Register(11),
    );
}

#[test]
fn golden_gripper_position_and_error() {
    let write = RtuRequest::WriteMultiple {
        slave: gripper_reg::SLAVE_ID,
        addr: gripper_reg::TARGET_POSITION,
        values: i32_to_registers(500).to_vec(),
    };
    check_request(
        Command::Rs485 {
            host: RS485_HOST_TOOL,
            pdu: write.encode(),
        },
        0x13,
        "00 13 00 03 00 0d 7c 09 08 10 07 00 00 02 04 00 00 01 f4",
    );
    let echo = RtuReply::WriteMultiple {
        slave: 8,
        addr: gripper_reg::TARGET_POSITION,
        count: 2,
    };
    check_reply(
        "00 13 00 03 00 09 7c 00 09 08 10 07 00 00 02",
        0x13,
        reg::RS485_RTU,
        0,
        Reply::Rs485 {
            host: 9,
            pdu: echo.encode(),
        },
    );
    // The tunnelled PDUs decode to the typed Modbus messages.
    let sent = Request::decode(&hex(
        "00 13 00 03 00 0d 7c 09 08 10 07 00 00 02 04 00 00 01 f4",
    ))
    .unwrap();
    let Command::Rs485 { pdu, .. } = sent.command().unwrap() else {
        panic!("not an RS-485 command")
    };
    let Ok(RtuRequest::WriteMultiple { values, .. }) = RtuRequest::decode(&pdu).unwrap() else {
        panic!("not a write")
    };
    assert_eq!(registers_to_i32([values[0], values[1]]), 500);

    let read = RtuRequest::ReadHolding {
        slave: 8,
        addr: gripper_reg::ERROR,
        count: 1,
    };
    check_request(
        Command::Rs485 {
            host: 9,
            pdu: read.encode(),
        },
        0x14,
        "00 14 00 03 00 08 7c 09 08 03 00 0f 00 01",
    );
    let answer = RtuReply::ReadHolding {
        slave: 8,
        values: vec![0],
    };
    check_reply(
        "00 14 00 03 00 08 7c 00 09 08 03 02 00 00",
        0x14,
        reg::RS485_RTU,
        0,
        Reply::Rs485 {
            host: 9,
            pdu: answer.encode(),
        },
    );
    assert_eq!(RtuReply::decode(&hex("08 03 02 00 00")).unwrap(), answer);
}

#[test]
fn golden_servo_cartesian() {
    let cmd = Command::ServoCartesian(ServoCartesian {
        pose: [300.0, 0.0, 250.0, PI32, 0.0, 0.0],
        speed: 100.0,
        acc: 2000.0,
        coord: Coord::Base,
    });
    check_request(
        cmd,
        0x18,
        "00 18 00 03 00 25 1e  00 00 96 43 00 00 00 00 00 00 7a 43 db 0f 49 40 00 00 00 00 \
         00 00 00 00 00 00 c8 42 00 00 fa 44 00 00 00 00",
    );
    check_reply(
        "00 18 00 03 00 02 1e 00",
        0x18,
        reg::MOVE_SERVO_CART,
        0,
        Reply::Empty,
    );
}

#[test]
fn golden_servoj() {
    let cmd = Command::ServoJoint(ServoJoint {
        joints: [0.0; 7],
        // The SDK's default joint speed and acceleration: 20°/s and 500°/s² in rad.
        speed: 20f64.to_radians() as f32,
        acc: 500f64.to_radians() as f32,
        mvtime: 0.0,
    });
    check_request(
        cmd,
        0x19,
        "00 19 00 03 00 29 1d  00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         00 00 00 00 00 00 00 00 c2 b8 b2 3e 58 a0 0b 41 00 00 00 00",
    );
    check_reply(
        "00 19 00 03 00 02 1d 00",
        0x19,
        reg::MOVE_SERVOJ,
        0,
        Reply::Empty,
    );
}

#[test]
fn frame_reader_splits_a_stream_fed_byte_by_byte() {
    let frames = [
        hex("00 02 00 03 00 02 0b 10"),
        hex("00 03 00 03 00 03 0d 10 05"),
        hex("00 08 00 03 00 1a 29 00 00 00 4f 43 00 00 00 00 00 00 e0 42 db 0f 49 40 00 00 00 00 00 00 00 00"),
        hex("00 13 00 03 00 09 7c 00 09 08 10 07 00 00 02"),
    ];
    let stream: Vec<u8> = frames.concat();
    let mut reader = FrameReader::new();
    let mut out = Vec::new();
    for b in &stream {
        reader.push(std::slice::from_ref(b));
        while let Some(f) = reader.next_frame().unwrap() {
            out.push(f);
        }
    }
    assert_eq!(out, frames);
    assert_eq!(reader.buffered(), 0);
}

#[test]
fn frame_reader_rejects_an_empty_body_and_moves_on() {
    let mut reader = FrameReader::new();
    reader.push(&hex("00 01 00 02 00 00  00 03 00 03 00 01 0d"));
    assert_eq!(reader.next_frame(), Err(ProtoError::EmptyBody));
    assert_eq!(
        reader.next_frame().unwrap(),
        Some(hex("00 03 00 03 00 01 0d"))
    );
}

#[test]
fn decoders_reject_wrong_lengths() {
    // Length field disagrees with the bytes.
    assert!(matches!(
        Response::decode(&hex("00 02 00 03 00 05 0b 10")),
        Err(ProtoError::LengthMismatch { .. })
    ));
    // A reply without its status byte.
    assert!(Response::decode(&hex("00 02 00 03 00 01 0b")).is_err());
    // GET_TCP_POSE with 5 floats.
    assert!(matches!(
        Reply::decode(reg::GET_TCP_POSE, &[0; 20]),
        Err(ProtoError::BadLength { .. })
    ));
    // MOVE_JOINT with a truncated float.
    assert!(Command::decode(reg::MOVE_JOINT, &[0; 39]).is_err());
    // An unknown funcode is reported as such.
    assert_eq!(
        Command::decode(200, &[]),
        Err(ProtoError::UnknownFuncode(200))
    );
}

#[test]
fn feedback_frame_round_trips() {
    let f = Feedback {
        tid: 7,
        prot: 3,
        status: Status::OK,
        kind: feedback_kind::MOTION_FINISH,
        funcode: reg::MOVE_LINE,
        task: 1,
        code: feedback_code::SUCCESS,
        time_us: 123_456_789,
    };
    let bytes = f.encode();
    assert_eq!(bytes.len(), 21);
    assert_eq!(&bytes[..8], &hex("00 07 00 03 00 0f ff 00")[..]);
    assert_eq!(bytes[8], 2);
    assert_eq!(bytes[9], 21);
    assert_eq!(Incoming::decode(&bytes).unwrap(), Incoming::Feedback(f));
}

#[test]
fn version_string_parses_like_the_sdk() {
    let v = parse_version("6,6,XI1304,AC1303,v2.3.0").unwrap();
    assert_eq!(
        (v.axis, v.robot_type, v.major, v.minor, v.patch),
        (6, 6, 2, 3, 0)
    );
    assert_eq!(v.robot_sn, "XI1304");
    assert!(parse_version("garbage").is_err());
    let r = Reply::Version("6,6,XI1304,AC1303,v2.3.0".into());
    let p = r.encode_payload();
    assert_eq!(p.len(), TEXT_REPLY_LEN);
    assert_eq!(Reply::decode(reg::GET_VERSION, &p).unwrap(), r);
}

#[test]
fn errors_and_warnings_map_both_ways() {
    for code in 0..=255u8 {
        if let Some(e) = ControllerError::from_code(code) {
            assert_eq!(e.code(), code);
            assert!(!e.meaning().is_empty());
        }
        if let Some(w) = ControllerWarning::from_code(code) {
            assert_eq!(w.code(), code);
        }
    }
    assert_eq!(
        ControllerError::from_code(23),
        Some(ControllerError::JointLimit)
    );
    assert_eq!(
        ControllerError::from_code(13),
        Some(ControllerError::Servo { joint: Some(3) })
    );
    assert_eq!(
        ControllerWarning::from_code(14),
        Some(ControllerWarning::NoSolution)
    );
    assert_eq!(ControllerError::from_code(0), None);
}

fn sample_status() -> ArmStatus {
    ArmStatus {
        state: 2,
        mode: 1,
        cmdnum: 3,
        joints: [0.1, -0.2, 0.3, 0.0, 1.5, -0.5, 0.0],
        tcp_pose: [207.0, 0.0, 112.0, PI32, 0.0, 0.0],
        joint_torques: [1.0; 7],
        brake_bits: 0x3F,
        enable_bits: 0x3F,
        error: 0,
        warn: 14,
        tcp_offset: [0.0, 0.0, 172.0, 0.0, 0.0, 0.0],
        tcp_load: [0.82, 0.0, 0.0, 48.0],
        collision_sensitivity: 3,
        teach_sensitivity: 1,
        gravity: [0.0, 0.0, -1.0],
    }
}

fn sample_rich(tail: bool) -> RichReport {
    RichReport {
        status: sample_status(),
        robot_type: 6,
        axis: 6,
        master_id: 0xAA,
        slave_id: 0x55,
        motor_tid: 1,
        motor_fid: 2,
        version: "v2.3.0".into(),
        tcp_bounds: MotionBounds {
            jerk: 100_000.0,
            min_acc: 1.0,
            max_acc: 50_000.0,
            min_speed: 0.1,
            max_speed: 1000.0,
        },
        joint_bounds: MotionBounds::default(),
        rot_jerk: 1.0,
        max_rot_acc: 2.0,
        servo_codes: [[0, 0]; 7],
        tgpio_codes: [0, 0],
        tail: tail.then_some(RichTail {
            temperatures: [30, 31, 32, 33, -1, 35, 0],
            target_tcp_speed: 12.5,
            target_joint_speeds: [0.5; 7],
            counter: 42,
            world_offset: [0.0; 6],
        }),
    }
}

#[test]
fn rich_report_layout_and_round_trip() {
    let r = sample_rich(true);
    let bytes = r.encode();
    assert_eq!(bytes.len(), RICH_REPORT_LEN);
    assert_eq!(&bytes[..4], &(RICH_REPORT_LEN as u32).to_be_bytes());
    // state | mode << 4 at byte 4, cmdnum at 5, error/warn at 89/90, robot type/axis at 145/146,
    // version at 151, temperatures at 245, counter at 284 (the SDK's `xarm/x3/report.py`).
    assert_eq!(bytes[4], 0x12);
    assert_eq!(&bytes[5..7], &[0, 3]);
    assert_eq!(&bytes[7..11], &0.1f32.to_le_bytes());
    assert_eq!(
        (bytes[87], bytes[88], bytes[89], bytes[90]),
        (0x3F, 0x3F, 0, 14)
    );
    assert_eq!((bytes[131], bytes[132]), (3, 1));
    assert_eq!(
        (bytes[145], bytes[146], bytes[147], bytes[148]),
        (6, 6, 0xAA, 0x55)
    );
    assert_eq!(&bytes[151..157], b"v2.3.0");
    assert_eq!(bytes[249], (-1i8) as u8);
    assert_eq!(&bytes[284..288], &42u32.to_be_bytes());
    assert_eq!(RichReport::decode(&bytes).unwrap(), r);

    let short = sample_rich(false);
    let b = short.encode();
    assert_eq!(b.len(), RICH_REPORT_MIN_LEN);
    assert_eq!(RichReport::decode(&b).unwrap(), short);
}

#[test]
fn rich_report_rejects_what_the_sdk_rejects() {
    let mut b = sample_rich(true).encode();
    b[131] = 6; // collision sensitivity outside 0..=5
    assert!(matches!(
        RichReport::decode(&b),
        Err(ProtoError::Invalid { .. })
    ));
    let b = sample_rich(true).encode();
    assert!(matches!(
        RichReport::decode(&b[..200]),
        Err(ProtoError::Short { .. })
    ));
    assert!(matches!(
        RichReport::decode(&b[..300]),
        Err(ProtoError::LengthMismatch { .. })
    ));
    // The old 233-declared 245-byte frame is accepted.
    let mut old = sample_rich(false).encode();
    old[..4].copy_from_slice(&233u32.to_be_bytes());
    assert!(RichReport::decode(&old).is_ok());
}

#[test]
fn rt_report_layout_and_round_trip() {
    let mut r = RtReport {
        timestamp_us: 1_000_000,
        state: 1,
        mode: 1,
        cmdnum: 0,
        ..RtReport::default()
    };
    r.actual_joints.position = [0.5, -0.5, 0.25, 0.0, 1.0, 0.0, 0.0];
    r.actual_tcp.pose = [300.0, 0.0, 200.0, PI32, 0.0, 0.0];
    r.tgpio_analog_in = [1200, -3];
    let b = r.encode();
    assert_eq!(b.len(), RT_REPORT_LEN);
    assert_eq!(&b[4..12], &1_000_000u64.to_be_bytes());
    assert_eq!(b[12], 0x11);
    // actual joint angles after 32 header bytes and 3 x 28 bytes of targets.
    assert_eq!(&b[116..120], &0.5f32.to_le_bytes());
    assert_eq!(&b[800..802], &1200i16.to_be_bytes());
    assert_eq!(RtReport::decode(&b).unwrap(), r);
    assert!(RtReport::decode(&b[..803]).is_err());
}

#[test]
fn report_reader_splits_and_guards_the_stream() {
    let a = sample_rich(true).encode();
    let stream = [a.clone(), a.clone()].concat();
    let mut rd = ReportReader::new();
    rd.push(&stream[..700]);
    assert_eq!(rd.next_frame().unwrap(), Some(a.clone()));
    assert_eq!(rd.next_frame().unwrap(), None);
    rd.push(&stream[700..]);
    assert_eq!(rd.next_frame().unwrap(), Some(a));
    // A frame of another length within one stream is refused.
    rd.push(&RtReport::default().encode());
    assert!(matches!(
        rd.next_frame(),
        Err(ProtoError::ReportLengthChanged { .. })
    ));
    let mut rd = ReportReader::new();
    rd.push(&u32::MAX.to_be_bytes());
    assert!(matches!(rd.next_frame(), Err(ProtoError::TooLong { .. })));
}

#[test]
fn commands_round_trip_through_their_params() {
    let cmds = vec![
        Command::MoveJoint(MoveJoint {
            joints: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.0],
            speed: 0.5,
            acc: 5.0,
            mvtime: 0.0,
            only_check: None,
        }),
        Command::MoveHome(MoveHome {
            speed: 0.3,
            acc: 3.0,
            mvtime: 0.0,
            only_check: Some(1),
        }),
        Command::MoveRelative(MoveRelative::linear(
            [10.0, 0.0, -5.0, 0.0, 0.0, 0.1],
            50.0,
            500.0,
        )),
        Command::MoveLine(MoveLine {
            pose: [1.0; 6],
            speed: 1.0,
            acc: 1.0,
            mvtime: 0.0,
            common: None,
            only_check: Some(1),
            motion_type: Some(2),
        }),
        Command::SetTcpOffset([0.0, 0.0, 172.0, 0.0, 0.0, 0.0]),
        Command::SetLoad {
            mass: 0.82,
            com: [0.0, 0.0, 48.0],
        },
        Command::TgpioWrite16 {
            host: 9,
            addr: tool_reg::SET_BAUD_INDEX,
            value: 11.0,
            extra: vec![],
        },
        Command::SetFeedbackType(feedback_kind::MOTION_FINISH),
        Command::ServoCartesian(ServoCartesian {
            pose: [0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
            speed: 0.0,
            acc: 0.0,
            coord: Coord::Tool,
        }),
    ];
    for c in cmds {
        let req = c.request(9, prot::PRIVATE);
        let back = Request::decode(&req.encode().unwrap()).unwrap();
        assert_eq!(back.command().unwrap(), c);
    }
}

#[test]
fn command_decoders_accept_exactly_the_lengths_of_their_fields() {
    // Zero bytes are valid in every field, so only the length decides.
    let accepted: &[(u8, &[usize])] = &[
        (reg::GET_STATE, &[0]),
        (reg::MOTION_EN, &[2]),
        (reg::SET_MODE, &[1, 2]),
        (reg::MOVE_LINE, &[36, 37, 38, 43, 44]),
        (reg::MOVE_JOINT, &[40, 41]),
        (reg::MOVE_HOME, &[12, 13]),
        (reg::MOVE_RELATIVE, &[46, 47, 48]),
        (reg::MOVE_SERVOJ, &[40]),
        (reg::MOVE_SERVO_CART, &[36]),
        (reg::SET_LOAD_PARAM, &[16]),
        (reg::TGPIO_R16B, &[3]),
    ];
    for (funcode, ok) in accepted {
        for n in 0..=60 {
            let r = Command::decode(*funcode, &vec![0; n]);
            assert_eq!(
                r.is_ok(),
                ok.contains(&n),
                "funcode {funcode}, {n} bytes: {r:?}"
            );
        }
    }
    // Open-ended: the RS-485 PDU and the TGPIO_W16B trailer.
    for (funcode, min) in [(reg::RS485_RTU, 3), (reg::TGPIO_W16B, 7)] {
        for n in 0..=60 {
            assert_eq!(Command::decode(funcode, &vec![0; n]).is_ok(), n >= min);
        }
    }
}

#[test]
fn command_errors_name_the_command_and_the_field() {
    let err = |funcode, params: &[u8]| Command::decode(funcode, params).unwrap_err().to_string();
    assert_eq!(
        err(reg::MOTION_EN, &[8, 2]),
        "MOTION_EN enable = 2 is out of range"
    );
    assert_eq!(
        err(reg::MOVE_JOINT, &[0; 39]),
        "MOVE_JOINT parameters at mvtime: 39 bytes, need at least 40"
    );
    assert_eq!(
        err(reg::MOVE_JOINT, &[0; 42]),
        "MOVE_JOINT parameters: 42 bytes, expected nothing after only_check"
    );
    assert_eq!(
        err(reg::GET_STATE, &[0]),
        "GET_STATE parameters: 1 bytes, expected 0"
    );
    assert_eq!(
        err(reg::MOVE_LINE, &[0; 40]),
        "MOVE_LINE parameters: 40 bytes, expected 36..=38 (old form) or 43..=44 (common form)"
    );
    let mut common = vec![0; 43];
    common[40] = 3;
    assert_eq!(
        err(reg::MOVE_LINE, &common),
        "MOVE_LINE coord = 3 is out of range"
    );
    let mut relative = vec![0; 46];
    relative[44] = 5;
    assert_eq!(
        err(reg::MOVE_RELATIVE, &relative),
        "MOVE_RELATIVE joint = 5 is out of range"
    );
    let mut servo = vec![0; 36];
    servo[32..].copy_from_slice(&2f32.to_le_bytes());
    assert!(matches!(
        Command::decode(reg::MOVE_SERVO_CART, &servo),
        Err(ProtoError::Invalid {
            field: "MOVE_SERVO_CART coord",
            ..
        })
    ));
}

#[test]
fn a_motion_type_without_only_check_is_sent_after_a_zero() {
    let mut m = MoveRelative::linear([0.0; 6], 1.0, 1.0);
    m.motion_type = Some(2);
    let p = Command::MoveRelative(m).encode_params();
    assert_eq!(&p[44..], &[0, 0, 0, 2]);
    let Command::MoveRelative(back) = Command::decode(reg::MOVE_RELATIVE, &p).unwrap() else {
        panic!("not a relative move")
    };
    assert_eq!((back.only_check, back.motion_type), (Some(0), Some(2)));
}
