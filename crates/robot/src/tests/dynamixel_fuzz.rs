//! The Dynamixel packet reader (`proto::Decoder`), the request and status parsers, and the bus
//! emulator never panic, and every rejection is a typed `ProtocolError`, over random and
//! near-valid byte streams fed in random pieces.
//!
//! Cases per property: `POINTACT_FUZZ_CASES` (default [`DEFAULT_CASES`], sized for CI). The full
//! run of at least 100 000 cases per property:
//!
//! ```text
//! POINTACT_FUZZ_CASES=100000 cargo test --release --features realsense --test dynamixel_fuzz
//! ```
//!
//! | test | inputs |
//! | --- | --- |
//! | `arbitrary_bytes` | any bytes, biased toward the header and stuffing bytes, sometimes with valid packets among them, in random pieces; memory held stays bounded |
//! | `near_valid_packets` | encoded packets with a byte flipped, cut short, lengthened, prefixed by noise or spliced |
//! | `valid_streams_round_trip` | several valid packets with noise between them: decoded exactly, in order |
//! | `emulator_answers_anything` | near-valid requests into the emulator: no panic, every answer a valid status packet |

use std::time::Instant;

use super::fuzz;
use crate::dynamixel::emulator::BusState;
use crate::dynamixel::proto::{
    instruction, Decoder, Packet, ProtocolError, Request, MAX_LENGTH, PREFIX_LEN,
};
use crate::settings;
use pointact_core::kinematics::RobotModel;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const DEFAULT_CASES: u32 = 5_000;

/// `run` of the shared fuzz runner with this file's case count.
fn run<S: Strategy>(
    name: &str,
    strategy: S,
    check: impl Fn(S::Value) -> Result<bool, TestCaseError>,
) -> usize {
    fuzz::run(name, fuzz::cases(DEFAULT_CASES), strategy, check)
}

/// Bytes biased toward the ones framing is made of.
fn byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        3 => any::<u8>(),
        2 => Just(0xFF),
        2 => Just(0xFD),
        1 => Just(0x00),
        1 => Just(0x55),
    ]
}

fn instruction_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        Just(instruction::PING),
        Just(instruction::READ),
        Just(instruction::WRITE),
        Just(instruction::SYNC_READ),
        Just(instruction::SYNC_WRITE),
        Just(instruction::REBOOT),
        Just(instruction::STATUS),
        any::<u8>(),
    ]
}

fn packet() -> impl Strategy<Value = Packet> {
    (
        prop_oneof![0u8..=10, Just(0xFE), any::<u8>()],
        instruction_byte(),
        prop::collection::vec(byte(), 0..48),
    )
        .prop_map(|(id, ins, params)| Packet::new(id, ins, params))
}

/// Feeds `bytes` in pieces of the given sizes (cycled) and drains every result after each piece.
fn decode_in_pieces(bytes: &[u8], pieces: &[usize]) -> Vec<Result<Packet, ProtocolError>> {
    let mut d = Decoder::new();
    let mut out = Vec::new();
    let mut at = 0;
    let mut i = 0;
    while at < bytes.len() {
        let n = pieces
            .get(i % pieces.len().max(1))
            .copied()
            .unwrap_or(1)
            .max(1);
        let end = (at + n).min(bytes.len());
        d.push(&bytes[at..end]);
        at = end;
        i += 1;
        while let Some(r) = d.next_packet() {
            out.push(r);
        }
        // Memory stays bounded: once drained, at most one packet's worth is held.
        assert!(
            d.pending() <= PREFIX_LEN + MAX_LENGTH as usize,
            "{} bytes held",
            d.pending()
        );
    }
    out
}

/// What every decoded packet must survive: both parsers, and re-encoding to the same packet.
fn exercise(p: &Packet) -> Result<(), TestCaseError> {
    let _ = Request::parse(p);
    let _ = p.clone().into_status();
    let mut d = Decoder::new();
    d.push(&p.encode());
    prop_assert_eq!(d.next_packet(), Some(Ok(p.clone())));
    Ok(())
}

fn pieces() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..40, 1..8)
}

#[test]
fn arbitrary_bytes() {
    // Random bytes, with now and then a valid packet among them so the `Ok` path is reached too
    // (random bytes almost never carry a matching CRC).
    let stream = prop::collection::vec(
        (
            prop::collection::vec(byte(), 0..120),
            prop::option::weighted(0.3, packet()),
        ),
        1..6,
    )
    .prop_map(|parts| {
        let mut bytes = Vec::new();
        for (noise, p) in parts {
            bytes.extend(noise);
            if let Some(p) = p {
                bytes.extend(p.encode());
            }
        }
        bytes
    });
    run("arbitrary_bytes", (stream, pieces()), |(bytes, pieces)| {
        let mut any_ok = false;
        for p in decode_in_pieces(&bytes, &pieces).into_iter().flatten() {
            exercise(&p)?;
            any_ok = true;
        }
        Ok(any_ok)
    });
}

#[derive(Debug, Clone)]
enum Mutation {
    None,
    Flip(usize, u8),
    Cut(usize),
    Insert(usize, Vec<u8>),
    Length(u16),
    Splice(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => Just(Mutation::None),
        3 => (any::<usize>(), 1u8..=255).prop_map(|(i, x)| Mutation::Flip(i, x)),
        2 => any::<usize>().prop_map(Mutation::Cut),
        2 => (any::<usize>(), prop::collection::vec(byte(), 1..8)).prop_map(|(i, b)| Mutation::Insert(i, b)),
        2 => any::<u16>().prop_map(Mutation::Length),
        1 => prop::collection::vec(byte(), 0..20).prop_map(Mutation::Splice),
    ]
}

fn mutate(mut wire: Vec<u8>, m: &Mutation) -> Vec<u8> {
    let n = wire.len();
    match m {
        Mutation::None => {}
        Mutation::Flip(i, x) => wire[i % n] ^= x,
        Mutation::Cut(i) => wire.truncate(i % n),
        Mutation::Insert(i, b) => {
            let at = i % (n + 1);
            wire.splice(at..at, b.iter().copied());
        }
        Mutation::Length(l) => wire[5..7].copy_from_slice(&l.to_le_bytes()),
        Mutation::Splice(b) => {
            let mut v = b.clone();
            v.extend(wire);
            wire = v;
        }
    }
    wire
}

#[test]
fn near_valid_packets() {
    let exact = run(
        "near_valid_packets",
        (packet(), mutation(), pieces()),
        |(p, m, pieces)| {
            let wire = mutate(p.encode(), &m);
            let results = decode_in_pieces(&wire, &pieces);
            for q in results.iter().flatten() {
                exercise(q)?;
            }
            if matches!(m, Mutation::None) {
                prop_assert_eq!(&results, &vec![Ok(p.clone())]);
                return Ok(true);
            }
            // A flipped byte is always caught: by the CRC, the length check, or because the
            // header no longer matches (then nothing is decoded at all).
            if let Mutation::Flip(..) = m {
                prop_assert!(
                    !results.iter().any(|r| r.as_ref() == Ok(&p)) || wire == p.encode(),
                    "a corrupted packet decoded as the original"
                );
            }
            Ok(false)
        },
    );
    assert!(exact > 0, "no unmutated packet was drawn");
}

#[test]
fn valid_streams_round_trip() {
    // Noise without 0xFF cannot start a header, so every packet must come out, in order.
    let noise = prop::collection::vec(0u8..0xFF, 0..6);
    run(
        "valid_streams_round_trip",
        (prop::collection::vec((noise, packet()), 1..6), pieces()),
        |(items, pieces)| {
            let mut wire = Vec::new();
            for (n, p) in &items {
                wire.extend(n);
                wire.extend(p.encode());
            }
            let got = decode_in_pieces(&wire, &pieces);
            let want: Vec<_> = items.iter().map(|(_, p)| Ok(p.clone())).collect();
            prop_assert_eq!(got, want);
            Ok(true)
        },
    );
}

#[test]
fn emulator_answers_anything() {
    let model = RobotModel::builtin("widowx250").unwrap();
    let s = settings::builtin("widowx250").unwrap();
    let s = s.as_dynamixel().unwrap();
    let state = std::sync::Mutex::new(BusState::new(s, &model, model.home()).unwrap());
    let answered = run(
        "emulator_answers_anything",
        (packet(), mutation()),
        |(p, m)| {
            // Requests as the emulator sees them: whatever the reader makes of the mutated bytes.
            let wire = mutate(p.encode(), &m);
            let mut any = false;
            for r in decode_in_pieces(&wire, &[wire.len().max(1)]) {
                let Ok(request) = r else { continue };
                let reply = state.lock().unwrap().handle(&request, Instant::now());
                let mut d = Decoder::new();
                d.push(&reply);
                while let Some(status) = d.next_packet() {
                    let status = status.map_err(|e| TestCaseError::fail(format!("{e}")))?;
                    prop_assert!(status.into_status().is_ok());
                    any = true;
                }
                prop_assert_eq!(d.pending(), 0, "a partial answer");
            }
            Ok(any)
        },
    );
    assert!(answered > 0, "the emulator never answered");
}
