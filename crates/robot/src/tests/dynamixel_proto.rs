//! DYNAMIXEL Protocol 2.0 framing against the example packets ROBOTIS publishes, byte for byte.
//!
//! Source of every byte string below: the ROBOTIS e-Manual, Protocol 2.0,
//! <https://emanual.robotis.com/docs/en/dxl/protocol2/> ("Instruction Details": Ping examples 1
//! and 2, Read, Write, Reboot, Sync Read, Sync Write, Bulk Read), and the CRC page
//! <https://emanual.robotis.com/docs/en/dxl/crc/>. The example servos are XM430-W210 (model
//! 1030 = 0x0406, firmware 38 = 0x26).

use crate::dynamixel::proto::{
    self, crc16, instruction, stuff, table, unstuff, Decoder, Packet, ProtocolError, Request,
    Status, StatusError, ALERT_BIT,
};

/// Each published packet, its decoded form, and the CRC the page prints (CRC_L, CRC_H).
struct Example {
    name: &'static str,
    bytes: &'static [u8],
    packet: fn() -> Packet,
}

fn status(id: u8, error: u8, data: &[u8]) -> Packet {
    Status::new(id, error, data.to_vec()).into_packet()
}

const EXAMPLES: &[Example] = &[
    // Ping, example 1: instruction to ID 1 and its status (model 0x0406, firmware 0x26).
    Example {
        name: "ping example 1 instruction",
        bytes: &[0xFF, 0xFF, 0xFD, 0x00, 0x01, 0x03, 0x00, 0x01, 0x19, 0x4E],
        packet: || proto::ping(1),
    },
    Example {
        name: "ping example 1 status (ID 1)",
        bytes: &[
            0xFF, 0xFF, 0xFD, 0x00, 0x01, 0x07, 0x00, 0x55, 0x00, 0x06, 0x04, 0x26, 0x65, 0x5D,
        ],
        packet: || status(1, 0, &[0x06, 0x04, 0x26]),
    },
    // Ping, example 2: broadcast, answered by ID 1 (as above) and ID 2.
    Example {
        name: "ping example 2 broadcast instruction",
        bytes: &[0xFF, 0xFF, 0xFD, 0x00, 0xFE, 0x03, 0x00, 0x01, 0x31, 0x42],
        packet: || proto::ping(proto::BROADCAST_ID),
    },
    Example {
        name: "ping example 2 status (ID 2)",
        bytes: &[
            0xFF, 0xFF, 0xFD, 0x00, 0x02, 0x07, 0x00, 0x55, 0x00, 0x06, 0x04, 0x26, 0x6F, 0x6D,
        ],
        packet: || status(2, 0, &[0x06, 0x04, 0x26]),
    },
    // Read: Present Position (132, 4 bytes) of ID 1 = 166.
    Example {
        name: "read instruction",
        bytes: &[
            0xFF, 0xFF, 0xFD, 0x00, 0x01, 0x07, 0x00, 0x02, 0x84, 0x00, 0x04, 0x00, 0x1D, 0x15,
        ],
        packet: || proto::read(1, 132, 4),
    },
    Example {
        name: "read status",
        bytes: &[
            0xFF, 0xFF, 0xFD, 0x00, 0x01, 0x08, 0x00, 0x55, 0x00, 0xA6, 0x00, 0x00, 0x00, 0x8C,
            0xC0,
        ],
        packet: || status(1, 0, &166i32.to_le_bytes()),
    },
    // Write: 512 to Goal Position (116, 4 bytes) of ID 1; the status is the page's empty one.
    Example {
        name: "write instruction",
        bytes: &[
            0xFF, 0xFF, 0xFD, 0x00, 0x01, 0x09, 0x00, 0x03, 0x74, 0x00, 0x00, 0x02, 0x00, 0x00,
            0xCA, 0x89,
        ],
        packet: || proto::write(1, 116, &512i32.to_le_bytes()),
    },
    Example {
        name: "write status",
        bytes: &[
            0xFF, 0xFF, 0xFD, 0x00, 0x01, 0x04, 0x00, 0x55, 0x00, 0xA1, 0x0C,
        ],
        packet: || status(1, 0, &[]),
    },
    // Reboot ID 1.
    Example {
        name: "reboot instruction",
        bytes: &[0xFF, 0xFF, 0xFD, 0x00, 0x01, 0x03, 0x00, 0x08, 0x2F, 0x4E],
        packet: || proto::reboot(1),
    },
    // Sync Read: Present Position of IDs 1 and 2 (166 and 2079).
    Example {
        name: "sync read instruction",
        bytes: &[
            0xFF, 0xFF, 0xFD, 0x00, 0xFE, 0x09, 0x00, 0x82, 0x84, 0x00, 0x04, 0x00, 0x01, 0x02,
            0xCE, 0xFA,
        ],
        packet: || proto::sync_read(132, 4, &[1, 2]),
    },
    Example {
        name: "sync read status (ID 2)",
        bytes: &[
            0xFF, 0xFF, 0xFD, 0x00, 0x02, 0x08, 0x00, 0x55, 0x00, 0x1F, 0x08, 0x00, 0x00, 0xBA,
            0xBE,
        ],
        packet: || status(2, 0, &2079i32.to_le_bytes()),
    },
    // Sync Write: Goal Position 150 to ID 1 and 170 to ID 2.
    Example {
        name: "sync write instruction",
        bytes: &[
            0xFF, 0xFF, 0xFD, 0x00, 0xFE, 0x11, 0x00, 0x83, 0x74, 0x00, 0x04, 0x00, 0x01, 0x96,
            0x00, 0x00, 0x00, 0x02, 0xAA, 0x00, 0x00, 0x00, 0x82, 0x87,
        ],
        packet: || {
            proto::sync_write(
                116,
                4,
                &[(1, &150i32.to_le_bytes()), (2, &170i32.to_le_bytes())],
            )
            .unwrap()
        },
    },
    // Bulk Read (not used by the driver, but its bytes check the generic framing and CRC):
    // Present Voltage (144, 2) of ID 1 and Present Temperature (146, 1) of ID 2, and the statuses.
    Example {
        name: "bulk read instruction",
        bytes: &[
            0xFF, 0xFF, 0xFD, 0x00, 0xFE, 0x0D, 0x00, 0x92, 0x01, 0x90, 0x00, 0x02, 0x00, 0x02,
            0x92, 0x00, 0x01, 0x00, 0x1A, 0x05,
        ],
        packet: || {
            Packet::new(
                proto::BROADCAST_ID,
                instruction::BULK_READ,
                vec![0x01, 0x90, 0x00, 0x02, 0x00, 0x02, 0x92, 0x00, 0x01, 0x00],
            )
        },
    },
    Example {
        name: "bulk read status (ID 1)",
        bytes: &[
            0xFF, 0xFF, 0xFD, 0x00, 0x01, 0x06, 0x00, 0x55, 0x00, 0x77, 0x00, 0xC3, 0x69,
        ],
        packet: || status(1, 0, &[0x77, 0x00]),
    },
    Example {
        name: "bulk read status (ID 2)",
        bytes: &[
            0xFF, 0xFF, 0xFD, 0x00, 0x02, 0x05, 0x00, 0x55, 0x00, 0x24, 0x8B, 0xA9,
        ],
        packet: || status(2, 0, &[0x24]),
    },
];

/// https://emanual.robotis.com/docs/en/dxl/protocol2/ — every example encodes to the published
/// bytes, exactly.
#[test]
fn published_examples_encode_byte_for_byte() {
    for ex in EXAMPLES {
        assert_eq!(
            (ex.packet)().encode(),
            ex.bytes,
            "{}: encoding differs from the e-Manual",
            ex.name
        );
    }
}

/// https://emanual.robotis.com/docs/en/dxl/protocol2/ (and /dxl/crc/): the CRC of each example,
/// computed over header..last parameter, is the published CRC_L, CRC_H.
#[test]
fn published_examples_crc() {
    for ex in EXAMPLES {
        let n = ex.bytes.len();
        let published = u16::from_le_bytes([ex.bytes[n - 2], ex.bytes[n - 1]]);
        assert_eq!(crc16(&ex.bytes[..n - 2]), published, "{}", ex.name);
    }
    // The ping instruction's CRC as printed on the page: CRC_L 0x19, CRC_H 0x4E.
    assert_eq!(
        crc16(&[0xFF, 0xFF, 0xFD, 0x00, 0x01, 0x03, 0x00, 0x01]),
        0x4E19
    );
    // The standard check value of this CRC (poly 0x8005, init 0, unreflected: CRC-16/UMTS).
    assert_eq!(crc16(b"123456789"), 0xFEE8);
}

/// https://emanual.robotis.com/docs/en/dxl/protocol2/ — the reader decodes each published packet
/// into what it means, whole and fed one byte at a time.
#[test]
fn published_examples_decode() {
    for ex in EXAMPLES {
        let mut d = Decoder::new();
        d.push(ex.bytes);
        assert_eq!(d.next_packet(), Some(Ok((ex.packet)())), "{}", ex.name);
        assert_eq!(d.next_packet(), None, "{}: left over", ex.name);

        let mut d = Decoder::new();
        for (i, b) in ex.bytes.iter().enumerate() {
            d.push(&[*b]);
            let got = d.next_packet();
            if i + 1 < ex.bytes.len() {
                assert_eq!(got, None, "{}: a packet before byte {}", ex.name, i + 1);
            } else {
                assert_eq!(got, Some(Ok((ex.packet)())), "{}", ex.name);
            }
        }
        assert_eq!(d.pending(), 0);
    }
}

/// https://emanual.robotis.com/docs/en/dxl/protocol2/ — the status packets read back as the
/// values the page states: model 1030, firmware 38; Present Position 166 and 2079.
#[test]
fn published_statuses_carry_the_stated_values() {
    let ping = Packet::new(1, instruction::STATUS, vec![0x00, 0x06, 0x04, 0x26])
        .into_status()
        .unwrap();
    assert_eq!(u16::from_le_bytes([ping.data[0], ping.data[1]]), 1030);
    assert_eq!(ping.data[2], 38);
    assert!(!ping.alert());
    assert_eq!(ping.error(), None);

    let mut d = Decoder::new();
    // Both sync-read statuses back to back, after line noise: ID 1 (166) then ID 2 (2079).
    d.push(&[0x00, 0xFF, 0x13, 0xFF, 0xFF]);
    d.push(&[
        0xFF, 0xFF, 0xFD, 0x00, 0x01, 0x08, 0x00, 0x55, 0x00, 0xA6, 0x00, 0x00, 0x00, 0x8C, 0xC0,
        0xFF, 0xFF, 0xFD, 0x00, 0x02, 0x08, 0x00, 0x55, 0x00, 0x1F, 0x08, 0x00, 0x00, 0xBA, 0xBE,
    ]);
    let a = d.next_packet().unwrap().unwrap().into_status().unwrap();
    let b = d.next_packet().unwrap().unwrap().into_status().unwrap();
    assert_eq!(
        (a.id, i32::from_le_bytes(a.data[..].try_into().unwrap())),
        (1, 166)
    );
    assert_eq!(
        (b.id, i32::from_le_bytes(b.data[..].try_into().unwrap())),
        (2, 2079)
    );
    assert_eq!(d.skipped(), 5);
}

/// https://emanual.robotis.com/docs/en/dxl/protocol2/ — the published instructions parse into
/// the requests they describe (what the emulator acts on).
#[test]
fn published_instructions_parse_into_requests() {
    let parse = |bytes: &[u8]| {
        let mut d = Decoder::new();
        d.push(bytes);
        Request::parse(&d.next_packet().unwrap().unwrap()).unwrap()
    };
    assert_eq!(parse(EXAMPLES[0].bytes), Request::Ping);
    assert_eq!(
        parse(EXAMPLES[4].bytes),
        Request::Read {
            address: 132,
            len: 4
        }
    );
    assert_eq!(
        parse(EXAMPLES[6].bytes),
        Request::Write {
            address: 116,
            data: vec![0x00, 0x02, 0x00, 0x00]
        }
    );
    assert_eq!(
        parse(EXAMPLES[9].bytes),
        Request::SyncRead {
            address: 132,
            len: 4,
            ids: vec![1, 2]
        }
    );
    assert_eq!(
        parse(EXAMPLES[11].bytes),
        Request::SyncWrite {
            address: 116,
            len: 4,
            entries: vec![(1, vec![0x96, 0, 0, 0]), (2, vec![0xAA, 0, 0, 0])]
        }
    );
}

/// https://emanual.robotis.com/docs/en/dxl/protocol2/ "Processing Order of Transmission": FF FF FD
/// in the body gains a FD; the length and CRC count the stuffed body; the reader removes it.
#[test]
fn byte_stuffing_round_trips_and_counts_in_length() {
    assert_eq!(stuff(&[0xFF, 0xFF, 0xFD]), [0xFF, 0xFF, 0xFD, 0xFD]);
    assert_eq!(
        stuff(&[0x01, 0xFF, 0xFF, 0xFD, 0xFF, 0xFF, 0xFD, 0x02]),
        [0x01, 0xFF, 0xFF, 0xFD, 0xFD, 0xFF, 0xFF, 0xFD, 0xFD, 0x02]
    );
    // Already stuffed-looking data is stuffed again (the spec's "FF FF FD FD" case).
    assert_eq!(
        stuff(&[0xFF, 0xFF, 0xFD, 0xFD]),
        [0xFF, 0xFF, 0xFD, 0xFD, 0xFD]
    );
    assert_eq!(stuff(&[0xFF, 0xFD, 0xFF]), [0xFF, 0xFD, 0xFF]);
    assert_eq!(
        unstuff(&[0xFF, 0xFF, 0xFD, 0xFD, 0xFD]).unwrap(),
        [0xFF, 0xFF, 0xFD, 0xFD]
    );
    assert_eq!(
        unstuff(&[0x01, 0xFF, 0xFF, 0xFD, 0x00]),
        Err(ProtocolError::Unstuffed {
            offset: 4,
            found: Some(0x00)
        })
    );

    // A goal position whose bytes are FF FF FD 00 (-196,609... as i32 LE) must survive a trip.
    let data = [0xFF, 0xFF, 0xFD, 0x00];
    let p = proto::write(1, 116, &data);
    let wire = p.encode();
    // Body: instr 03, 74 00, FF FF FD [FD] 00 → 8 bytes; length = 8 + 2.
    assert_eq!(u16::from_le_bytes([wire[5], wire[6]]), 10);
    assert_eq!(
        &wire[7..15],
        &[0x03, 0x74, 0x00, 0xFF, 0xFF, 0xFD, 0xFD, 0x00]
    );
    let mut d = Decoder::new();
    d.push(&wire);
    assert_eq!(d.next_packet(), Some(Ok(p)));
}

/// Malformed input: every rejection is a typed error, and the reader finds the next good packet.
#[test]
fn malformed_packets_are_typed_errors_and_the_reader_recovers() {
    let good = EXAMPLES[5].bytes; // read status, ID 1
                                  // CRC corrupted.
    let mut bad = good.to_vec();
    let n = bad.len();
    bad[n - 1] ^= 0x01;
    let mut d = Decoder::new();
    d.push(&bad);
    d.push(good);
    assert!(matches!(
        d.next_packet(),
        Some(Err(ProtocolError::Crc {
            received: 0xC18C,
            computed: 0xC08C
        }))
    ));
    assert_eq!(d.next_packet(), Some(Ok((EXAMPLES[5].packet)())));

    // Length field below the minimum, and one over the cap.
    for length in [0u16, 2, proto::MAX_LENGTH + 1, 0xFFFF] {
        let mut d = Decoder::new();
        let mut bytes = vec![0xFF, 0xFF, 0xFD, 0x00, 0x01];
        bytes.extend_from_slice(&length.to_le_bytes());
        d.push(&bytes);
        assert_eq!(
            d.next_packet(),
            Some(Err(ProtocolError::Length {
                length,
                max: proto::MAX_LENGTH
            }))
        );
    }

    // Truncated: the reader waits, and says how much it holds of how much.
    let mut d = Decoder::new();
    d.push(&good[..9]);
    assert_eq!(d.next_packet(), None);
    assert_eq!(d.partial(), Some((9, good.len())));

    // Not a status packet; a status without its error byte.
    assert_eq!(
        proto::ping(1).into_status(),
        Err(ProtocolError::NotStatus { instruction: 0x01 })
    );
    assert_eq!(
        Packet::new(1, instruction::STATUS, vec![]).into_status(),
        Err(ProtocolError::NoErrorByte)
    );

    // Requests with the wrong parameter count.
    assert!(matches!(
        Request::parse(&Packet::new(1, instruction::READ, vec![0x84, 0x00, 0x04])),
        Err(ProtocolError::Params { .. })
    ));
    assert!(matches!(
        Request::parse(&Packet::new(
            0xFE,
            instruction::SYNC_WRITE,
            vec![0x74, 0, 4, 0, 1, 0, 0]
        )),
        Err(ProtocolError::Params { .. })
    ));
    // A SYNC_WRITE entry of the wrong size is refused when building it.
    assert!(matches!(
        proto::sync_write(116, 4, &[(1, &[0, 0])]),
        Err(ProtocolError::Params { .. })
    ));
}

/// https://emanual.robotis.com/docs/en/dxl/protocol2/ "Error": bit 7 is the alert, bits 0–6 the
/// error number 1..7.
#[test]
fn status_error_byte() {
    let cases = [
        (0x01, StatusError::ResultFail),
        (0x02, StatusError::Instruction),
        (0x03, StatusError::Crc),
        (0x04, StatusError::DataRange),
        (0x05, StatusError::DataLength),
        (0x06, StatusError::DataLimit),
        (0x07, StatusError::Access),
        (0x08, StatusError::Unknown(8)),
    ];
    for (byte, want) in cases {
        let s = Status::new(1, byte, vec![]);
        assert_eq!(s.error(), Some(want));
        assert!(!s.alert());
        assert_eq!(want.number(), byte);
        let alerted = Status::new(1, byte | ALERT_BIT, vec![]);
        assert_eq!(alerted.error(), Some(want));
        assert!(alerted.alert());
    }
    let only_alert = Status::new(1, ALERT_BIT, vec![1, 2]);
    assert!(only_alert.alert());
    assert_eq!(only_alert.error(), None);
}

/// The control table addresses the driver depends on (XM430-W350 e-Manual control table).
#[test]
fn control_table_addresses() {
    let items = [
        (table::DRIVE_MODE, 10, 1),
        (table::OPERATING_MODE, 11, 1),
        (table::SECONDARY_ID, 12, 1),
        (table::TORQUE_ENABLE, 64, 1),
        (table::HARDWARE_ERROR_STATUS, 70, 1),
        (table::GOAL_PWM, 100, 2),
        (table::PROFILE_ACCELERATION, 108, 4),
        (table::PROFILE_VELOCITY, 112, 4),
        (table::GOAL_POSITION, 116, 4),
        (table::MOVING, 122, 1),
        (table::PRESENT_CURRENT, 126, 2),
        (table::PRESENT_POSITION, 132, 4),
    ];
    for (item, address, size) in items {
        assert_eq!((item.address, item.size), (address, size));
    }
    // Profile acceleration, velocity and goal position are contiguous: one SYNC_WRITE sets all three.
    assert_eq!(
        table::PROFILE_ACCELERATION.address + 4,
        table::PROFILE_VELOCITY.address
    );
    assert_eq!(
        table::PROFILE_VELOCITY.address + 4,
        table::GOAL_POSITION.address
    );
}
